package harness

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/sessionlog"
	"corral.dev/services/harness/internal/core"
)

// askWith sends a session's first request, which sets what the session
// runs with beyond its tenant's policy.
func askWith(t *testing.T, js jetstream.JetStream, session uuid.UUID, c event.SessionConfig, prompt string) uuid.UUID {
	t.Helper()
	req := event.Request{Header: event.NewHeader(event.TypeRequest, "acme", session), User: "ada", Prompt: prompt, SessionConfig: c}
	if err := bus.Publish(context.Background(), js, bus.RequestSubject("acme", session, "ada"), req.ID.String(), &req); err != nil {
		t.Fatal(err)
	}
	return session
}

// A session's first request sets what it runs with: the model is offered
// its tools alone and reads its instructions after Corral's; a call of a
// tool it is not offered is refused without running; a call of a tool it
// asks about waits for a reviewer, and runs once one approves; its budget
// lowers its tenant's. A harness that rebuilds the session from its log
// runs it the same way.
func TestSessionConfigRunsTheSession(t *testing.T) {
	_, _, js := natstest.Run(t)
	pub, key, _ := ed25519.GenerateKey(nil)
	fake := modeltest.New(t, echo([]modeltest.Call{bashCall("echo hi"), fileCall("Write", "/workspace/x", "content", "x")}))
	runHarnessWith(t, js, fake, map[string]string{
		"CORRAL_APPROVAL_PUBLIC_KEY": event.EncodeKey(pub),
		"CORRAL_POLICY_FILE":         policyFile(t, "budgets: {session: {steps: 50}}\n"),
	})
	ts := startTools(t, js, output("hi"))
	cfg := event.SessionConfig{System: "Talk like a pirate.", Tools: []string{"Bash", "Read"}, Ask: []string{"Bash"}, Budget: json.RawMessage(`{"steps": 500, "cost_usd": 3}`)}
	session := askWith(t, js, uuid.Must(uuid.NewV7()), cfg, "say hi")

	var held *event.ApprovalRequested
	natstest.WaitFor(t, 15*time.Second, func() error {
		if asked := ofType[*event.ApprovalRequested](logOf(t, js, "acme", session)); len(asked) > 0 {
			held = asked[0]
			return nil
		}
		return errors.New("no call held for a reviewer yet")
	})
	evs := logOf(t, js, "acme", session)
	if held.Tool != "Bash" || held.Rule != core.RuleAsk || len(ts.ran()) != 0 {
		t.Fatalf("held %s under rule %q with %d calls run, want Bash under %s before anything ran", held.Tool, held.Rule, len(ts.ran()), core.RuleAsk)
	}
	reqs := fake.Requests()
	if got := reqs[0].Tools; !slices.Equal(got, []string{"Bash", "Read"}) {
		t.Errorf("the model was offered %v, want Bash and Read", got)
	}
	sys := reqs[0].System
	if corral, own := strings.Index(sys, `user "ada" of tenant "acme"`), strings.Index(sys, "Talk like a pirate."); corral < 0 || own < corral {
		t.Errorf("system prompt %q, want Corral's and then the session's own", sys)
	}
	rec := ofType[*event.SessionRequested](evs)[0]
	if rec.System != cfg.System || !slices.Equal(rec.Tools, cfg.Tools) || !slices.Equal(rec.Ask, cfg.Ask) || string(rec.Budget) != `{"steps":500,"cost_usd":3}` {
		t.Errorf("recorded %+v, want the request's configuration, its budget as the policy writes it", rec.SessionConfig)
	}

	d := &event.ApprovalDecided{Header: event.NewHeader(event.TypeApprovalDecided, "acme", session), Call: held.Call,
		ArgsHash: held.ArgsHash, Approved: true, Reviewer: "grace"}
	d.Sign(key)
	if err := sessionlog.New(js, sessionlog.Options{As: sessionlog.Approval}).Record(context.Background(), d, d.ID.String()); err != nil {
		t.Fatal(err)
	}
	evs = ended(t, js, "acme", session, 1)
	done := ofType[*event.SessionCompleted](evs)
	if len(done) != 1 {
		t.Fatalf("the session did not complete: %+v", ofType[*event.SessionFailed](evs))
	}
	want := "this session is not offered the tool Write (its tools are Bash, Read), so the call was not run"
	if !strings.HasPrefix(done[0].Answer, "results: hi | ") || !strings.HasSuffix(done[0].Answer, want) {
		t.Errorf("answer %q, want the approved call's output and the refusal %q", done[0].Answer, want)
	}
	if ran := ts.ran(); len(ran) != 1 || ran[0].call.Name != "Bash" {
		t.Errorf("calls run: %+v, want the approved Bash alone", ran)
	}

	// Its own budget is under its tenant's: it pauses there.
	js2, _ := start(t, forever)
	startTools(t, js2, output("ok"))
	capped := askWith(t, js2, uuid.Must(uuid.NewV7()), event.SessionConfig{Budget: json.RawMessage(`{"steps":2}`)}, "go on forever")
	if p := lastPause(t, settled(t, js2, "acme", capped, 1)); p.Budget != "session.steps" || p.Usage.Steps != 2 {
		t.Errorf("paused over %s after %d steps, want session.steps after 2", p.Budget, p.Usage.Steps)
	}
}

// What a session runs with is checked before it starts, and set by its
// first request alone: a request that sets it wrongly, or a follow-up
// that sets it at all, is refused saying why.
func TestSessionConfigRefusedWhenInvalid(t *testing.T) {
	js, fake := start(t, nil)
	for _, tc := range []struct {
		name string
		cfg  event.SessionConfig
		want string
	}{
		{"a tool to ask about the session is not offered", event.SessionConfig{Tools: []string{"Bash"}, Ask: []string{"Read"}}, "ask: Read is not among the session's tools (Bash)"},
		{"instructions over 32 KiB", event.SessionConfig{System: strings.Repeat("€", 11000)}, "system is 33000 bytes; the limit is 32768"},
		{"a tool that is none of Corral's", event.SessionConfig{Tools: []string{"WebFetch"}}, "/tools/0: value must be one of"},
		{"a budget's unknown cap", event.SessionConfig{Budget: json.RawMessage(`{"dollars":3}`)}, "/budget/dollars: unknown field"},
		{"a negative cap", event.SessionConfig{Budget: json.RawMessage(`{"steps":-1}`)}, "/budget/steps: minimum"},
		{"a wall time that does not read", event.SessionConfig{Budget: json.RawMessage(`{"wall_time":"soon"}`)}, `budget: limits: wall_time: time: invalid duration "soon"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			session := askWith(t, js, uuid.Must(uuid.NewV7()), tc.cfg, "hi")
			if f := failure(t, ended(t, js, "acme", session, 1)); f.Code != event.CodeInvalidRequest || !strings.Contains(f.Reason, tc.want) {
				t.Errorf("failure %s %q, want %s saying %q", f.Code, f.Reason, event.CodeInvalidRequest, tc.want)
			}
		})
	}
	if n := len(fake.Requests()); n != 0 {
		t.Errorf("the model was asked %d times, want never", n)
	}

	session := ask(t, js, "acme", "ada", uuid.Must(uuid.NewV7()), "", "hi")
	ended(t, js, "acme", session, 1)
	askWith(t, js, session, event.SessionConfig{Tools: []string{"Read"}}, "now read only")
	evs := ended(t, js, "acme", session, 2)
	if f := failure(t, evs); !strings.Contains(f.Reason, "set only by its first request") {
		t.Errorf("a follow-up setting the tools: %s %q, want it refused", f.Code, f.Reason)
	}
}
