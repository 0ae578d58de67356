package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/approvalapi"
	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/sessionindex"
	"corral.dev/pkg/sessionlog"
	"corral.dev/services/gateway"
)

func TestParseIDPrefix(t *testing.T) {
	t.Parallel()
	id := uuid.MustParse("0195a3b2-7c4d-7e8f-9a0b-1c2d3e4f5a6b")
	for _, tc := range []struct {
		arg   string
		match bool
		usage bool
	}{
		{arg: id.String(), match: true},
		{arg: strings.ToUpper(id.String()), match: true},
		{arg: "0195", match: true},
		{arg: "0195A3B2-7C", match: true},
		{arg: "0195a3b27c4d", match: true}, // the dashes may be left out
		{arg: "0196", match: false},
		{arg: "019", usage: true},       // too short
		{arg: "01-9", usage: true},      // three hex digits
		{arg: "zzzz", usage: true},      // not hex
		{arg: "0195a3b2 ", usage: true}, // not hex either
		{arg: "", usage: true},          // nothing
		{arg: id.String() + "0", usage: true},
	} {
		p, err := parseIDPrefix("session", tc.arg)
		if tc.usage {
			var ee *exitError
			if err == nil || !errors.As(err, &ee) || ee.code != exitUsage {
				t.Errorf("parseIDPrefix(%q) = %v, want a usage error", tc.arg, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseIDPrefix(%q): %v", tc.arg, err)
			continue
		}
		if got := p.matches(id); got != tc.match {
			t.Errorf("parseIDPrefix(%q).matches(%s) = %t, want %t", tc.arg, id, got, tc.match)
		}
	}
}

// prefixBus is an embedded server with a session index and logs of
// sessions whose IDs share prefixes, in two tenants.
type prefixBus struct {
	*clientBus
	// a and b are acme's and share 0195aaaa; c is globex's; dup is in
	// both tenants; logOnly is globex's, in no index entry yet.
	a, b, c, dup, logOnly uuid.UUID
}

func newPrefixBus(t *testing.T) *prefixBus {
	t.Helper()
	b := &prefixBus{
		clientBus: newClientBus(t),
		a:         uuid.MustParse("0195aaaa-0000-7000-8000-00000000000a"),
		b:         uuid.MustParse("0195aaaa-1111-7000-8000-00000000000b"),
		c:         uuid.MustParse("0195bbbb-0000-7000-8000-00000000000c"),
		dup:       uuid.MustParse("0195dddd-0000-7000-8000-00000000000d"),
		logOnly:   uuid.MustParse("0195eeee-0000-7000-8000-00000000000e"),
	}
	ctx := context.Background()
	if err := gateway.Setup(ctx, b.js); err != nil {
		t.Fatal(err)
	}
	kv, err := b.js.KeyValue(ctx, bus.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	for _, s := range []struct {
		tenant string
		id     uuid.UUID
	}{{"acme", b.a}, {"acme", b.b}, {"globex", b.c}, {"acme", b.dup}, {"globex", b.dup}} {
		e := sessionindex.Entry{User: "ada", Status: sessionindex.Completed, Model: "openai:m", Started: now, LastEvent: now,
			Title: "tidy <b> & <i> of " + s.tenant, Requests: 1, Seq: 1}
		data, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, sessionindex.Key(s.tenant, s.id), data); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []struct {
		tenant string
		id     uuid.UUID
	}{{"acme", b.a}, {"globex", b.c}, {"globex", b.logOnly}} {
		ev := &event.SessionRequested{Header: event.NewHeader(event.TypeSessionRequested, s.tenant, s.id), Request: uuid.Must(uuid.NewV7()),
			User: "ada", Model: "openai:m", Prompt: "prompt of " + s.tenant + " <b> & <i>"}
		b.record(t, sessionlog.Writer(sessionlog.Writers(event.TypeSessionRequested)[0]), ev)
	}
	return b
}

// TestSessionPrefixes checks that a command naming a session takes its ID
// or a unique prefix of it, found in the session index across the tenants
// the reader may read (here, a server that signs in anyone: all), with
// its tenant the session's unless --tenant names one; an ambiguous prefix
// is a usage error listing the sessions, a prefix of none a failure.
func TestSessionPrefixes(t *testing.T) {
	t.Parallel()
	b := newPrefixBus(t)
	for _, tc := range []struct {
		name string
		args []string
		code int
		// stdout and stderr hold these; with empty, stdout nothing.
		stdout, stderr []string
		empty          bool
	}{
		{name: "unique prefix", args: []string{"logs", "--json", "0195aaaa-0"}, stdout: []string{`"prompt":"prompt of acme <b> & <i>"`, `"tenant":"acme"`}},
		{name: "no dashes", args: []string{"logs", "--json", "0195bbbb00"}, stdout: []string{`"prompt":"prompt of globex <b> & <i>"`}},
		{name: "whole ID, tenant from the index", args: []string{"logs", b.c.String()}, stdout: []string{"prompt of globex"}},
		{name: "whole ID, not yet indexed", args: []string{"logs", b.logOnly.String()}, stdout: []string{"prompt of globex"}},
		{name: "ambiguous", args: []string{"logs", "0195aaaa"}, code: exitUsage,
			stderr: []string{"ambiguous", b.a.String(), b.b.String(), "tidy <b> & <i> of acme"}},
		{name: "ambiguous across tenants", args: []string{"logs", b.dup.String()}, code: exitUsage,
			stderr: []string{"ambiguous", "tenant acme", "tenant globex"}},
		{name: "a tenant filters", args: []string{"logs", "--tenant", "globex", "0195dd"}, code: exitFailed,
			stderr: []string{"no events for session " + b.dup.String() + " in tenant globex"}},
		{name: "a tenant overrides", args: []string{"logs", "--tenant", "globex", "0195aaaa"}, code: exitFailed,
			stderr: []string{"no session starting with 0195aaaa in tenant globex"}},
		{name: "none", args: []string{"logs", "0195ffff"}, code: exitFailed,
			stderr: []string{"no session starting with 0195ffff in any tenant"}},
		{name: "too short", args: []string{"logs", "019"}, code: exitUsage, stderr: []string{"at least its first 4 hex digits"}},
		{name: "not hex", args: []string{"stop", "wxyz"}, code: exitUsage, stderr: []string{`session "wxyz"`}},
		{name: "raise: ambiguous", args: []string{"raise", "0195aaaa", "--steps", "3", "--reason", "more"}, code: exitUsage, stderr: []string{"ambiguous"}},
		{name: "run --session: none", args: []string{"run", "--session", "0195ffff", "hi"}, code: exitFailed, stderr: []string{"--session: no session starting with 0195ffff"}},
		{name: "run --fork: ambiguous", args: []string{"run", "--fork", "0195aaaa", "hi"}, code: exitUsage, stderr: []string{"--fork: session 0195aaaa is ambiguous"}},
		{name: "sessions --json as written", args: []string{"sessions", "--tenant", "acme", "--json"}, stdout: []string{`"title":"tidy <b> & <i> of acme"`}},
		{name: "sessions as written", args: []string{"sessions", "--tenant", "acme"}, stdout: []string{"tidy <b> & <i> of acme"}},
		{name: "sessions --json of none", args: []string{"sessions", "--tenant", "initech", "--json"}, empty: true},
		{name: "checked before connecting", args: []string{"logs", "--nats", "nats://127.0.0.1:1", "zz"}, code: exitUsage},
		{name: "run --session checked before connecting", args: []string{"run", "--nats", "nats://127.0.0.1:1", "--session", "zz", "hi"}, code: exitUsage,
			stderr: []string{`--session: session "zz"`}},
		{name: "workspace: too short", args: []string{"workspace", "01", "ls"}, code: exitUsage, stderr: []string{"hex digits"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := b.corral(t, tc.args...)
			if code != tc.code {
				t.Fatalf("corral %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(tc.args, " "), code, tc.code, stdout, stderr)
			}
			if tc.empty && stdout != "" {
				t.Errorf("corral %s: stdout %q, want nothing", strings.Join(tc.args, " "), stdout)
			}
			for _, w := range tc.stdout {
				if !strings.Contains(stdout, w) {
					t.Errorf("corral %s: stdout\n%s\nwant %s", strings.Join(tc.args, " "), stdout, w)
				}
			}
			for _, w := range tc.stderr {
				if !strings.Contains(stderr, w) {
					t.Errorf("corral %s: stderr\n%s\nwant %s", strings.Join(tc.args, " "), stderr, w)
				}
			}
		})
	}
}

func TestMatchApproval(t *testing.T) {
	t.Parallel()
	a := &approvalapi.Approval{ID: uuid.MustParse("01a2aaaa-0000-7000-8000-000000000001"), Tool: "Bash", Status: approvalapi.Pending}
	b := &approvalapi.Approval{ID: uuid.MustParse("01a2aaaa-1111-7000-8000-000000000002"), Tool: "Edit", Status: approvalapi.Approved}
	// A raise's ID, in two sessions: one approval here.
	r1 := &approvalapi.Approval{ID: uuid.MustParse("01a2bbbb-0000-7000-8000-000000000003"), Session: uuid.Must(uuid.NewV7())}
	r2 := &approvalapi.Approval{ID: r1.ID, Session: uuid.Must(uuid.NewV7())}
	listed := []*approvalapi.Approval{a, b, r1, r2}
	for _, tc := range []struct {
		arg  string
		want uuid.UUID
		code int
		msg  string
	}{
		{arg: "01a2aaaa-0", want: a.ID},
		{arg: "01a2aaaa1", want: b.ID},
		{arg: "01a2bb", want: r1.ID},
		{arg: "01a2aaaa", code: exitUsage, msg: "approval 01a2aaaa is ambiguous"},
		{arg: "01a2cc", code: exitFailed, msg: "no approval starting with 01a2cc in tenant acme"},
	} {
		p, err := parseIDPrefix("approval", tc.arg)
		if err != nil {
			t.Fatal(err)
		}
		got, err := matchApproval(p, "acme", listed)
		var ee *exitError
		switch {
		case tc.code == 0 && (err != nil || got != tc.want):
			t.Errorf("matchApproval(%s) = %s, %v; want %s", tc.arg, got, err, tc.want)
		case tc.code != 0 && (!errors.As(err, &ee) || ee.code != tc.code || !strings.Contains(err.Error(), tc.msg)):
			t.Errorf("matchApproval(%s) = %v; want exit %d, %q", tc.arg, err, tc.code, tc.msg)
		}
		if tc.code == exitUsage && err != nil && (!strings.Contains(err.Error(), a.ID.String()) || !strings.Contains(err.Error(), b.ID.String())) {
			t.Errorf("matchApproval(%s) = %v; want both candidates listed", tc.arg, err)
		}
	}
}
