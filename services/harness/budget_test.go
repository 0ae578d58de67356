package harness

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/event"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/sessionlog"
	"corral.dev/services/harness/internal/core"
)

// forever is a model that never stops: every turn it makes a Bash call.
func forever(modeltest.Conversation) (modeltest.Turn, error) {
	return modeltest.Turn{Calls: []modeltest.Call{bashCall("true")}}, nil
}

// turns counts the model's responses in a session's log.
func turns(evs []event.Event) int { return len(ofType[*event.ModelResponded](evs)) }

// settled waits until the session has completed, failed or paused n
// times in all, and returns its log.
func settled(t *testing.T, js jetstream.JetStream, tenant string, session uuid.UUID, n int) []event.Event {
	t.Helper()
	var evs []event.Event
	natstest.WaitFor(t, 15*time.Second, func() error {
		evs = logOf(t, js, tenant, session)
		got := len(ofType[*event.SessionCompleted](evs)) + len(ofType[*event.SessionFailed](evs)) + len(ofType[*event.SessionPaused](evs))
		if got < n {
			return fmt.Errorf("session settled %d times, want %d", got, n)
		}
		return nil
	})
	return evs
}

// lastPause returns the session's last pause, or fails the test.
func lastPause(t *testing.T, evs []event.Event) *event.SessionPaused {
	t.Helper()
	ps := ofType[*event.SessionPaused](evs)
	if len(ps) == 0 {
		t.Fatalf("the session did not pause: %+v", ofType[*event.SessionFailed](evs))
	}
	return ps[len(ps)-1]
}

// A session over a budget of its tenant's pauses, saying which budget,
// what it used and what to run to go on; a user over a daily budget has
// each session paused that day, while another user of the tenant still
// goes on, until the tenant's own daily budget is spent, which fails the
// sessions.
func TestBudgetsPauseSessions(t *testing.T) {
	_, _, js := natstest.Run(t)
	runHarnessWith(t, js, modeltest.New(t, forever), map[string]string{"CORRAL_POLICY_FILE": policyFile(t, `
prices:
  "*": {input: 1000, output: 1000}   # $0.001 a token
tenants:
  steps:  {budgets: {session: {steps: 3}}}
  tokens: {budgets: {session: {tokens: 3000}}}
  cost:   {budgets: {session: {cost_usd: 2}}}
  daily:  {budgets: {user_daily: {steps: 3}}}
  team:   {budgets: {tenant_daily: {steps: 3}}}
`)})
	startTools(t, js, output("ok"))
	run := func(tenant, user string) (uuid.UUID, []event.Event) {
		t.Helper()
		session := ask(t, js, tenant, user, uuid.Must(uuid.NewV7()), "", "go on forever")
		return session, settled(t, js, tenant, session, 1)
	}
	for _, tc := range []struct {
		tenant, budget, raise string
		minTurns              int
	}{
		{"steps", "session.steps", "--steps 6", 3},
		{"tokens", "session.tokens", "--tokens 6000", 2},
		{"cost", "session.cost_usd", "--cost-usd 4", 2},
	} {
		t.Run(tc.tenant, func(t *testing.T) {
			session, evs := run(tc.tenant, "ada")
			p, n := lastPause(t, evs), turns(evs)
			if p.Budget != tc.budget || n < tc.minTurns || len(ofType[*event.SessionFailed](evs)) != 0 {
				t.Errorf("paused over %q after %d turns: %s; want %s after at least %d, and no failure", p.Budget, n, p.Reason, tc.budget, tc.minTurns)
			}
			if tc.budget == "session.steps" && (n != 3 || p.Usage.Steps != 3) {
				t.Errorf("%d turns, usage %+v, want 3", n, p.Usage)
			}
			want := fmt.Sprintf("corral raise --tenant %s %s %s --reason ", tc.tenant, session, tc.raise)
			if !strings.HasPrefix(p.Resume, want) {
				t.Errorf("resume = %q, want it to start %q", p.Resume, want)
			}
		})
	}
	t.Run("daily", func(t *testing.T) {
		if _, evs := run("daily", "ada"); lastPause(t, evs).Budget != "user_daily.steps" || turns(evs) != 3 {
			t.Errorf("ada's first session: %q after %d turns, want user_daily.steps after 3", lastPause(t, evs).Budget, turns(evs))
		}
		_, evs := run("daily", "ada")
		if p := lastPause(t, evs); p.Budget != "user_daily.steps" || turns(evs) != 0 || !strings.Contains(p.Resume, "00:00 UTC") || !strings.Contains(p.Resume, "--user ada ") {
			t.Errorf("ada's second session: %q after %d turns (%s), want user_daily.steps before the model is asked", p.Budget, turns(evs), p.Resume)
		}
		if _, evs := run("daily", "bob"); lastPause(t, evs).Budget != "user_daily.steps" || turns(evs) != 3 {
			t.Errorf("bob's session: %q after %d turns, want his own 3", lastPause(t, evs).Budget, turns(evs))
		}
	})
	t.Run("tenant daily", func(t *testing.T) {
		if _, evs := run("team", "ada"); failure(t, evs).Budget != "tenant_daily.steps" || turns(evs) != 3 {
			t.Errorf("ada's session: %q after %d turns, want tenant_daily.steps after 3", failure(t, evs).Budget, turns(evs))
		}
		_, evs := run("team", "bob")
		if f := failure(t, evs); f.Code != event.CodeBudget || f.Budget != "tenant_daily.steps" || turns(evs) != 0 {
			t.Errorf("bob's session: %s %q after %d turns, want tenant_daily.steps before the model is asked", f.Code, f.Budget, turns(evs))
		}
		if n := len(ofType[*event.SessionPaused](evs)); n != 0 {
			t.Errorf("%d pauses, want the tenant's day to fail the session", n)
		}
	})
}

// raiser asks for raises of a session's caps and decides them as the
// approval service would.
type raiser struct {
	t       *testing.T
	js      jetstream.JetStream
	tenant  string
	session uuid.UUID
	key     ed25519.PrivateKey
}

// raise records a raise to limits and a decision on it signed with key,
// and returns the raise's ID.
func (r raiser) raise(limits string, approved bool, key ed25519.PrivateKey) uuid.UUID {
	r.t.Helper()
	id := uuid.Must(uuid.NewV7())
	record(r.t, r.js, &event.BudgetRaise{Header: event.NewHeader(event.TypeBudgetRaise, r.tenant, r.session), Raise: id, User: "ada", Limits: json.RawMessage(limits), Reason: "more"}, "raise:"+id.String())
	d := &event.ApprovalDecided{Header: event.NewHeader(event.TypeApprovalDecided, r.tenant, r.session), Call: id,
		ArgsHash: event.ArgsHash(event.BudgetTool, json.RawMessage(limits)), Approved: approved, Reviewer: "grace"}
	d.Sign(key)
	if err := sessionlog.New(r.js, sessionlog.Options{As: sessionlog.Approval}).Record(context.Background(), d, d.ID.String()); err != nil {
		r.t.Fatal(err)
	}
	return id
}

// A session paused over its steps goes on where it was once a reviewer
// approves a raise: the model is asked for its next turn with the
// conversation as it was, and no new request. A raise denied, or one
// whose decision does not verify, leaves it paused.
func TestRaiseResumesAPausedSession(t *testing.T) {
	_, _, js := natstest.Run(t)
	pub, key, _ := ed25519.GenerateKey(nil)
	_, otherKey, _ := ed25519.GenerateKey(nil)
	fake := modeltest.New(t, echo([]modeltest.Call{bashCall("echo 1")}, []modeltest.Call{bashCall("echo 2")}, []modeltest.Call{bashCall("echo 3")}))
	runHarnessWith(t, js, fake, map[string]string{
		"CORRAL_APPROVAL_PUBLIC_KEY": event.EncodeKey(pub),
		"CORRAL_POLICY_FILE":         policyFile(t, "tenants: {acme: {budgets: {session: {steps: 2}}}}\n"),
	})
	ts := startTools(t, js, func(_ string, c *event.ToolCall) *event.ToolCompleted {
		return &event.ToolCompleted{Output: "ran " + string(c.Input)}
	})
	session := ask(t, js, "acme", "ada", uuid.Must(uuid.NewV7()), "", "count")
	evs := settled(t, js, "acme", session, 1)
	if p := lastPause(t, evs); p.Budget != "session.steps" || turns(evs) != 2 || len(ts.ran()) != 2 {
		t.Fatalf("paused over %q after %d turns and %d calls, want session.steps after 2 and 2", p.Budget, turns(evs), len(ts.ran()))
	}

	r := raiser{t, js, "acme", session, key}
	r.raise(`{"steps":10}`, false, key)
	r.raise(`{"steps":10}`, true, otherKey)
	idle(t, js)
	if evs := logOf(t, js, "acme", session); turns(evs) != 2 || len(ofType[*event.SessionResumed](evs)) != 0 || len(ofType[*event.SessionPaused](evs)) != 1 {
		t.Fatalf("after a denial and a forged approval: %d turns, %d resumptions, %d pauses; want it paused still", turns(evs), len(ofType[*event.SessionResumed](evs)), len(ofType[*event.SessionPaused](evs)))
	}

	id := r.raise(`{"steps":10}`, true, key)
	evs = ended(t, js, "acme", session, 1)
	done := ofType[*event.SessionCompleted](evs)
	if len(done) != 1 {
		t.Fatalf("the session did not complete: %+v", ofType[*event.SessionFailed](evs))
	}
	if res := ofType[*event.SessionResumed](evs); len(res) != 1 || res[0].Raise != id || res[0].Reviewer != "grace" {
		t.Errorf("resumptions = %+v, want one, by grace's approval of %s", res, id)
	}
	if n := len(ofType[*event.SessionRequested](evs)); n != 1 {
		t.Errorf("%d requests, want the first alone", n)
	}
	want := `results: ran {"command":"echo 1"} | ran {"command":"echo 2"} | ran {"command":"echo 3"}`
	if done[0].Answer != want || done[0].Turns != 4 {
		t.Errorf("answer %q after %d turns, want %q after 4", done[0].Answer, done[0].Turns, want)
	}
}

// A session over its wall time while a call runs pauses once: the call
// finishes and its result is kept, the watch pauses it no more, and a
// raise of the wall time lets it go on with the result. Time paused does
// not count against the wall time.
func TestWallTimePausesAWaitingSessionOnce(t *testing.T) {
	_, _, js := natstest.Run(t)
	pub, key, _ := ed25519.GenerateKey(nil)
	fake := modeltest.New(t, echo([]modeltest.Call{bashCall("sleep")}))
	runHarnessWith(t, js, fake, map[string]string{
		"CORRAL_APPROVAL_PUBLIC_KEY": event.EncodeKey(pub),
		"CORRAL_POLICY_FILE":         policyFile(t, "budgets: {session: {wall_time: 1s}}\n"),
	})
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	// Registered after startTools' own cleanup, so run before it: a
	// failed test leaves no call blocked, and the tools stop.
	startTools(t, js, func(string, *event.ToolCall) *event.ToolCompleted {
		<-release
		return &event.ToolCompleted{Output: "slept"}
	})
	t.Cleanup(free)
	session := ask(t, js, "acme", "ada", uuid.Must(uuid.NewV7()), "", "sleep")
	evs := settled(t, js, "acme", session, 1)
	if p := lastPause(t, evs); p.Budget != "session.wall_time" || !strings.Contains(p.Resume, "--wall-time 2s") {
		t.Fatalf("paused over %q (%s), want session.wall_time", p.Budget, p.Resume)
	}
	free()
	natstest.WaitFor(t, 10*time.Second, func() error {
		if len(ofType[*event.ToolCompleted](logOf(t, js, "acme", session))) == 0 {
			return fmt.Errorf("no result yet")
		}
		return nil
	})
	idle(t, js)
	time.Sleep(3500 * time.Millisecond) // thrice the watch's period, past the wall time again
	if n := len(ofType[*event.SessionPaused](logOf(t, js, "acme", session))); n != 1 {
		t.Fatalf("%d pauses, want the watch to leave a paused session be", n)
	}

	// It worked a second or two before its pause, and waited more than
	// three and a half seconds paused: under a wall time of four it goes
	// on only if the wait does not count.
	raiser{t, js, "acme", session, key}.raise(`{"wall_time":"4s"}`, true, key)
	evs = ended(t, js, "acme", session, 1)
	if done := ofType[*event.SessionCompleted](evs); len(done) != 1 || done[0].Answer != "results: slept" {
		t.Fatalf("the session did not complete with the result kept while paused: %+v %+v", done, ofType[*event.SessionPaused](evs))
	}
}

// A session may take only so many model turns, whatever its budget.
func TestTurnLimit(t *testing.T) {
	_, _, js := natstest.Run(t)
	runHarnessWith(t, js, modeltest.New(t, forever), map[string]string{"CORRAL_MAX_TURNS": "2"})
	startTools(t, js, output("ok"))
	session := ask(t, js, "acme", "ada", uuid.Must(uuid.NewV7()), "", "go on forever")
	evs := ended(t, js, "acme", session, 1)
	if f := failure(t, evs); f.Code != core.CodeTurnLimit || f.Reason != "the session reached its limit of 2 model turns (CORRAL_MAX_TURNS, in the harness's environment, raises it for every session)" {
		t.Errorf("failure = %s %q", f.Code, f.Reason)
	}
	if n := turns(evs); n != 2 {
		t.Errorf("%d turns, want 2", n)
	}
	if n := len(ofType[*event.ToolCompleted](evs)); n != 2 {
		t.Errorf("%d results, want both turns' calls run", n)
	}
}
