package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/event"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/upstreamtest"
)

// leaveThings writes a file in /workspace and one in /tmp in its first
// turn, and looks for both in its second; then it answers with what it
// read.
func leaveThings(c modeltest.Conversation) (modeltest.Turn, error) {
	switch modeltest.Turns(c) {
	case 0:
		return modeltest.Turn{Calls: []modeltest.Call{bash("echo kept > /workspace/note.txt; echo tmp > /tmp/t")}}, nil
	case 1:
		return modeltest.Turn{Calls: []modeltest.Call{bash("cat /workspace/note.txt; ls -A /tmp")}}, nil
	}
	return modeltest.Turn{Text: "done"}, nil
}

// Notes that tell the model its sandbox was rebuilt, as the sandbox-manager
// words them.
const (
	restoredFrom = "sandbox was rebuilt since its last call"
	newSandbox   = "this command ran in a new sandbox"
)

// pauseThenRaise runs leaveThings in tenant raise until it pauses over its
// token budget, calls between (when not nil) while it is paused, then has
// a reviewer approve a raise and waits for the session to complete. It
// returns the session and the result of its second call as the model was
// sent it.
func (p *platform) pauseThenRaise(t *testing.T, between func(session uuid.UUID)) (uuid.UUID, string) {
	t.Helper()
	paused, session, turns := p.budgetPause(t, "raise", "ada", "leave things")
	if paused.Budget != "session.tokens" || turns != 1 {
		t.Fatalf("paused over %q after %d turns, want session.tokens after 1", paused.Budget, turns)
	}
	if between != nil {
		between(session)
	}
	if code, _, stderr := p.corral(t, "raise", "--tenant", "raise", session.String(), "--tokens", "1000000", "--reason", "more"); code != 0 {
		t.Fatalf("corral raise exited %d: %s", code, stderr)
	}
	id, _ := p.pending(t, "raise")
	if code, _, stderr := p.corral(t, "approve", "--tenant", "raise", "--user", "grace", id.String()); code != 0 {
		t.Fatalf("corral approve exited %d: %s", code, stderr)
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		for _, ev := range p.events(t, session) {
			if _, ok := ev.(*event.SessionCompleted); ok {
				return nil
			}
		}
		return fmt.Errorf("the session has not completed yet")
	})
	// What the model was sent after its second call: the request of its
	// third turn.
	for _, c := range p.model.Requests() {
		if modeltest.Turns(c) != 2 {
			continue
		}
		rs := modeltest.Results(c)
		if len(rs) != 1 {
			t.Fatalf("the third turn's request has %d results, want 1", len(rs))
		}
		return session, rs[0].Content
	}
	t.Fatal("the model was never asked for a third turn")
	return session, ""
}

// metricWait waits until the sandbox-manager's metrics show line.
func (p *platform) metricWait(t *testing.T, line string) {
	t.Helper()
	natstest.WaitFor(t, 30*time.Second, func() error {
		if _, page := getPage(t, "http://"+p.getenv("CORRAL_METRICS_LISTEN")+"/metrics"); !strings.Contains(page, line) {
			return fmt.Errorf("the metrics lack %q", line)
		}
		return nil
	})
}

func budgetFile(t *testing.T) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(budgetPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// A session raised while its sandbox was still there (running or
// suspended) goes on in it: /tmp is as it left it, and the model is told
// nothing about its sandbox.
func TestRaisedSessionInTheSameSandboxIsToldNothing(t *testing.T) {
	p := startDev(t, leaveThings, map[string]string{"CORRAL_POLICY_FILE": budgetFile(t)})
	_, got := p.pauseThenRaise(t, nil)
	if got != "kept\nt\n" {
		t.Errorf("the second call's result, as the model was sent it: %q, want %q", got, "kept\nt\n")
	}
}

// A session raised after its sandbox was stopped while it waited (its
// workspace kept) is told, with the result of its next command, that the
// command ran in a new sandbox where /tmp started empty.
func TestRaisedSessionIsToldItsSandboxIsNew(t *testing.T) {
	p := startDev(t, leaveThings, map[string]string{
		"CORRAL_POLICY_FILE":          budgetFile(t),
		"CORRAL_SANDBOX_IDLE_TIMEOUT": "100ms",
		"CORRAL_SANDBOX_STOP_TIMEOUT": "100ms",
	})
	session, got := p.pauseThenRaise(t, func(uuid.UUID) {
		p.metricWait(t, `corral_sandbox_sandboxes{state="stopped"} 1`)
	})
	if !strings.HasPrefix(got, "Note: "+newSandbox) || !strings.Contains(got, "/tmp") || !strings.HasSuffix(got, "\nkept\n") {
		t.Errorf("the second call's result, as the model was sent it, lacks the note that its sandbox is new, or its output:\n%s", got)
	}
	if strings.Contains(got, restoredFrom) {
		t.Errorf("the model was told its workspace was restored, which it was not:\n%s", got)
	}
	// corral logs shows it too.
	code, stdout, stderr := p.corral(t, "logs", "--tenant", "raise", session.String())
	if code != 0 {
		t.Fatalf("corral logs exited %d: %s", code, stderr)
	}
	wantIn(t, "corral logs", stdout, "Note: "+newSandbox)
}

// A session raised after its workspace was removed while it waited (idle
// past CORRAL_SANDBOX_WORKSPACE_TTL) is told, with the result of its next
// call, that its sandbox was rebuilt from the workspace's last snapshot,
// and when that snapshot was written.
func TestRaisedSessionIsToldItsSandboxWasRebuilt(t *testing.T) {
	p := startDev(t, leaveThings, map[string]string{
		"CORRAL_POLICY_FILE":           budgetFile(t),
		"CORRAL_SANDBOX_IDLE_TIMEOUT":  "100ms",
		"CORRAL_SANDBOX_STOP_TIMEOUT":  "100ms",
		"CORRAL_SANDBOX_WORKSPACE_TTL": "1ms",
		"CORRAL_SANDBOX_REAP_INTERVAL": "100ms",
	})
	before := time.Now().UTC().Add(-time.Second)
	_, got := p.pauseThenRaise(t, func(session uuid.UUID) {
		p.metricWait(t, `corral_sandbox_workspaces_reaped_total{why="idle"} 1`)
	})
	if !strings.HasPrefix(got, "Note: this session's "+restoredFrom) || !strings.HasSuffix(got, "\nkept\n") {
		t.Errorf("the second call's result, as the model was sent it, lacks the note that its sandbox was rebuilt, or its output:\n%s", got)
	}
	_, when, _ := strings.Cut(got, "written at ")
	taken, err := time.Parse("2006-01-02 15:04:05 UTC", strings.SplitN(when, ".", 2)[0])
	if err != nil || taken.Before(before.Truncate(time.Second)) || taken.After(time.Now()) {
		t.Errorf("the note's snapshot time %q (%v): want the time of the first call's snapshot, after %s", when, err, before)
	}
	if strings.Contains(got, newSandbox) {
		t.Errorf("the model was told twice:\n%s", got)
	}
}

// A session started from a repository is told nothing of its sandbox with
// its first command's result: the sandbox that cloned the repository into
// its workspace was no sandbox of its own.
func TestSessionFromARepoIsToldNothing(t *testing.T) {
	token := "ghp_" + strings.Repeat("n0t3", 9)
	up := newUpstreams(t)
	forge := upstreamtest.Git(t, up.ca, "git.example.test", token)
	forge.NewRepo(t, "app", map[string]string{"README.md": "the app\n"})
	up.add(forge.Upstream)
	p := startDev(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
		if modeltest.Turns(c) == 0 {
			return modeltest.Turn{Calls: []modeltest.Call{bash("cat /workspace/README.md")}}, nil
		}
		return modeltest.Turn{Text: "read: " + modeltest.Results(c)[0].Content}, nil
	}, up.env(t, forgePolicy))
	p.vault(t, "acme", "ada", token, "forge", "--host", "git.example.test", "--basic-user", "x-access-token")
	code, stdout, stderr := p.corral(t, "run", "--tenant", "acme", "--user", "ada",
		"--repo", "https://git.example.test/app.git", "--ref", "main", "read the readme")
	if code != 0 {
		t.Fatalf("corral run exited %d:\n%s", code, stderr)
	}
	if want := "read: the app\n"; !strings.Contains(stdout, want) {
		t.Errorf("the answer %q, want %q: the first command's result alone, with no note", stdout, want)
	}
	for _, ev := range p.events(t, sessionOf(t, stderr)) {
		if r, ok := ev.(*event.ToolCompleted); ok && r.Name == "Bash" && strings.Contains(r.Output, "Note:") {
			t.Errorf("the first command's result has a note:\n%s", r.Output)
		}
	}
}
