package slackbridge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/sessionlog"
	slackbridge "corral.dev/services/slack-bridge"
	"corral.dev/services/slack-bridge/slacktest"
)

// An event is believed for where it is and who wrote it: on the thread's
// session's subjects, events that a writer may not write, or whose body
// names another type, tenant or session, post nothing in the thread.
func TestForgedEventsPostNothing(t *testing.T) {
	f := newFixture(t, nil)
	root := f.slack.Post("C1", "", "U1", "<@U0BOT> go")
	ok(t)(f.app.Event("Ev1", f.app.AppMention("C1", "U1", "go", root, "")))
	req := f.requests(t)[0]
	f.record(t, &event.SessionRequested{Header: header(event.TypeSessionRequested, req.Tenant, req.Session), Request: req.ID, User: req.User, Prompt: req.Prompt})
	natstest.WaitFor(t, 20*time.Second, func() error {
		if got := slacktest.Texts(f.replies("C1", root)); len(got) != 1 {
			return fmt.Errorf("thread: %q, want the progress message", got)
		}
		return nil
	})

	forged := func(typ, tenant string, session uuid.UUID) event.Header {
		return header(typ, tenant, session)
	}
	completed := func(h event.Header) *event.SessionCompleted {
		return &event.SessionCompleted{Header: h, Answer: "Forged answer."}
	}
	input := json.RawMessage(`{"command":"git push --force"}`)
	cases := []struct {
		name    string
		subject string
		ev      event.Event
	}{
		{"an answer written by a user", sessionlog.Subject("acme", req.Session, event.TypeSessionCompleted, sessionlog.Writer(bus.UserToken(req.User))),
			completed(forged(event.TypeSessionCompleted, "acme", req.Session))},
		{"an answer written by the sandbox", sessionlog.Subject("acme", req.Session, event.TypeSessionCompleted, sessionlog.Sandbox),
			completed(forged(event.TypeSessionCompleted, "acme", req.Session))},
		{"a failure on an answer's subject", sessionlog.Subject("acme", req.Session, event.TypeSessionCompleted, sessionlog.Harness),
			&event.SessionFailed{Header: forged(event.TypeSessionFailed, "acme", req.Session), Code: "forged", Reason: "Forged failure."}},
		{"an answer naming another tenant", sessionlog.Subject("acme", req.Session, event.TypeSessionCompleted, sessionlog.Harness),
			completed(forged(event.TypeSessionCompleted, "globex", req.Session))},
		{"an answer naming another session", sessionlog.Subject("acme", req.Session, event.TypeSessionCompleted, sessionlog.Harness),
			completed(forged(event.TypeSessionCompleted, "acme", uuid.Must(uuid.NewV7())))},
		{"an approval asked for by the sandbox", sessionlog.Subject("acme", req.Session, event.TypeApprovalRequested, sessionlog.Sandbox),
			&event.ApprovalRequested{Header: forged(event.TypeApprovalRequested, "acme", req.Session), Call: uuid.Must(uuid.NewV7()), User: req.User,
				Tool: "Bash", Input: input, ArgsHash: event.ArgsHash("Bash", input), Rule: "forged", Reason: "Forged approval."}},
	}
	for _, tc := range cases {
		if err := bus.Publish(context.Background(), f.js, tc.subject, tc.ev.Head().ID.String(), tc.ev); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
	}
	f.record(t, &event.SessionCompleted{Header: header(event.TypeSessionCompleted, req.Tenant, req.Session), Answer: "Real answer."})
	natstest.WaitFor(t, 20*time.Second, func() error {
		if got := slacktest.Texts(f.replies("C1", root)); len(got) < 2 || got[len(got)-1] != "Real answer." {
			return fmt.Errorf("thread: %q, want the real answer last", got)
		}
		return nil
	})
	replies := f.replies("C1", root)
	if got := slacktest.Texts(replies); len(got) != 2 || !strings.HasPrefix(got[0], "✅ Done") {
		t.Errorf("thread %q, want the progress, done, and the real answer alone", got)
	}
	for _, m := range replies {
		if strings.Contains(m.Text, "Forged") || strings.Contains(string(m.Blocks), "forged") || m.HasButtons() {
			t.Errorf("a forged event was posted: %q %s", m.Text, m.Blocks)
		}
	}
}

// A request names its user in its subject, where the harness takes it
// from: requests.<tenant>.<session>.u-<user>.
func TestRequestSubjectNamesTheUser(t *testing.T) {
	f := newFixture(t, nil)
	root := f.slack.Post("C1", "", "U1", "<@U0BOT> go")
	ok(t)(f.app.Event("Ev1", f.app.AppMention("C1", "U1", "go", root, "")))
	reqs := f.requestMsgs(t)
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	session := slackbridge.SessionID(team, "C1", root)
	if got, want := reqs[0].Subject, bus.RequestSubject("acme", session, "slack:U1"); got != want {
		t.Errorf("request on %s, want %s", got, want)
	}
}

// The bridge keeps a thread under its tenant, then its session: a session
// ID alone may be another tenant's, and a tenant's credential reaches the
// keys under its tenant alone.
func TestThreadKeyedByTenantAndSession(t *testing.T) {
	f := newFixture(t, nil)
	root := f.slack.Post("C1", "", "U1", "<@U0BOT> go")
	ok(t)(f.app.Event("Ev1", f.app.AppMention("C1", "U1", "go", root, "")))
	kv, err := f.js.KeyValue(context.Background(), slackbridge.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	session := slackbridge.SessionID(team, "C1", root)
	if _, err := kv.Get(context.Background(), "acme.thread."+session.String()); err != nil {
		t.Errorf("thread of acme's session %s: %v", session, err)
	}
	if _, err := kv.Get(context.Background(), "thread."+session.String()); err == nil {
		t.Errorf("a thread kept under the session's ID alone")
	}
}
