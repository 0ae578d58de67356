package main

import (
	"strings"
	"testing"

	"corral.dev/pkg/event"
	"corral.dev/pkg/modeltest"
)

// A session forked from another starts from that session's workspace, as
// of its last snapshot, and goes its own way: what either writes after
// the fork, the other does not see.
func TestForkStartsFromAnotherSessionsWorkspace(t *testing.T) {
	script := func(c modeltest.Conversation) (modeltest.Turn, error) {
		if rs := modeltest.Results(c); len(rs) > 0 {
			return modeltest.Turn{Text: "results: " + rs[0].Content}, nil
		}
		prompt := c.Messages[len(c.Messages)-1].Text
		switch {
		case strings.Contains(prompt, "original"):
			return modeltest.Turn{Calls: []modeltest.Call{bash("echo from-original > f && echo written")}}, nil
		case strings.Contains(prompt, "forked"):
			return modeltest.Turn{Calls: []modeltest.Call{bash("cat f; echo fork-only > g")}}, nil
		}
		return modeltest.Turn{Calls: []modeltest.Call{bash("ls")}}, nil
	}
	p := startDev(t, script, nil)
	code, _, stderr := p.corral(t, "run", "--tenant", "acme", "--user", "ada", "the original")
	if code != 0 {
		t.Fatalf("corral run exited %d: %s", code, stderr)
	}
	original := sessionOf(t, stderr)

	code, stdout, stderr := p.corral(t, "run", "--tenant", "acme", "--user", "ada", "--fork", original.String(), "the forked one")
	if code != 0 {
		t.Fatalf("corral run --fork exited %d: %s", code, stderr)
	}
	wantIn(t, "the fork's answer", stdout, "fork of session "+original.String(), "from-original")
	fork := sessionOf(t, stderr)

	code, stdout, stderr = p.corral(t, "run", "--tenant", "acme", "--user", "ada", "--session", original.String(), "again")
	if code != 0 {
		t.Fatalf("follow-up exited %d: %s", code, stderr)
	}
	// Its sandbox was stopped when its request was done: the result says
	// so first, in a note of its own line.
	got := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(stdout), "results:"))
	if note, rest, ok := strings.Cut(got, "\n"); ok && strings.HasPrefix(note, "Note: ") {
		got = rest
	}
	if got != "f" {
		t.Errorf("the original's workspace after the fork holds %q, want only f", got)
	}
	var requested *event.SessionRequested
	for _, ev := range p.events(t, fork) {
		if r, ok := ev.(*event.SessionRequested); ok {
			requested = r
		}
	}
	if requested == nil || requested.Fork != original {
		t.Errorf("the fork's request = %+v, want it to name %s", requested, original)
	}

	// A fork must name a session of the same tenant, and start a session.
	code, _, stderr = p.corral(t, "run", "--tenant", "other", "--user", "ada", "--fork", original.String(), "the forked one")
	if code != 1 || !strings.Contains(stderr, "fork: no session "+original.String()+" in tenant other") {
		t.Errorf("a fork across tenants: exit %d: %s", code, stderr)
	}
	code, _, stderr = p.corral(t, "run", "--tenant", "acme", "--user", "ada", "--fork", original.String(), "--session", fork.String(), "x")
	if code != 2 || !strings.Contains(stderr, "cannot go with --session") {
		t.Errorf("--fork with --session: exit %d: %s", code, stderr)
	}
}
