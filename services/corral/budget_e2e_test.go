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
)

// forever is a model that never stops: every turn it runs its prompt as a
// Bash command.
func forever(c modeltest.Conversation) (modeltest.Turn, error) {
	return modeltest.Turn{Calls: []modeltest.Call{bash(c.Messages[0].Text)}}, nil
}

const budgetPolicy = `
prices:
  "*": {input: 1000, output: 1000}   # $0.001 a token
tenants:
  steps:   {budgets: {session: {steps: 3}}}
  raise:   {budgets: {session: {tokens: 100}}}
  tokens:  {budgets: {session: {tokens: 3000}}}
  cost:    {budgets: {session: {cost_usd: 2}}}
  sandbox: {budgets: {session: {sandbox_seconds: 1}}}
  wall:    {budgets: {session: {wall_time: 2s}}}
  waiting: {budgets: {session: {wall_time: 2s}}}
  daily:   {budgets: {user_daily: {steps: 3}}}
  team:    {budgets: {tenant_daily: {steps: 3}}}
`

// budgetRun runs a session of tenant as user, which must end its run with
// exit status 1, and returns its session, its log and what corral run
// said.
func (p *platform) budgetRun(t *testing.T, tenant, user, prompt string) (uuid.UUID, []any, string) {
	t.Helper()
	code, _, stderr := p.corral(t, "run", "--tenant", tenant, "--user", user, prompt)
	if code != 1 {
		t.Fatalf("corral run in %s exited %d, want 1:\n%s", tenant, code, stderr)
	}
	session := sessionOf(t, stderr)
	return session, p.events(t, session), stderr
}

// budgetPause runs a session of tenant as user, which must pause over a
// budget, and returns its last pause, its session and its model turns.
// corral run must have said which budget, and what lets it go on.
func (p *platform) budgetPause(t *testing.T, tenant, user, prompt string) (*event.SessionPaused, uuid.UUID, int) {
	t.Helper()
	session, evs, stderr := p.budgetRun(t, tenant, user, prompt)
	var paused *event.SessionPaused
	for _, ev := range evs {
		switch e := ev.(type) {
		case *event.SessionPaused:
			paused = e
		case *event.SessionFailed:
			t.Fatalf("session in %s failed: %s %s", tenant, e.Code, e.Reason)
		}
	}
	if paused == nil {
		t.Fatalf("session in %s did not pause:\n%s", tenant, stderr)
	}
	wantIn(t, "corral run", stderr, "is paused over its budget "+paused.Budget, paused.Resume)
	return paused, session, turnsOf(evs)
}

func turnsOf(evs []any) int {
	n := 0
	for _, ev := range evs {
		if _, ok := ev.(*event.ModelResponded); ok {
			n++
		}
	}
	return n
}

// workspaceOf is where the session's sandbox keeps its /workspace.
func (p *platform) workspaceOf(tenant string, session uuid.UUID) string {
	return filepath.Join(p.data, "workspaces", tenant, session.String())
}

// Sessions over their budgets pause, keeping their sandboxes; over the
// tenant's daily budget they fail, their sandboxes destroyed.
func TestBudgetsPauseSessions(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(budgetPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startDev(t, forever, map[string]string{"CORRAL_POLICY_FILE": file})

	for _, tc := range []struct {
		tenant, prompt, budget, raise string
		minTurns                      int
	}{
		// The harness's own tests cover the budgets it counts alone
		// (steps, tokens, cost, daily); these need the sandbox.
		// Paused when its calls' time in the sandbox reached its budget,
		// however many that took (see below).
		{"sandbox", "sleep 0.2", "session.sandbox_seconds", "--sandbox-seconds 2", 2},
		{"wall", "sleep 0.7", "session.wall_time", "--wall-time 4s", 2},
		// Over its wall time while a call runs: paused there, the call
		// finishing, its result kept for when the session goes on.
		{"waiting", "sleep 4", "session.wall_time", "--wall-time 4s", 1},
	} {
		t.Run(tc.tenant, func(t *testing.T) {
			t.Parallel()
			paused, session, turns := p.budgetPause(t, tc.tenant, "ada", tc.prompt)
			if paused.Budget != tc.budget {
				t.Errorf("paused over %q: %s, want %s", paused.Budget, paused.Reason, tc.budget)
			}
			if want := fmt.Sprintf(`corral raise --tenant %s %s %s --reason "why the session needs more"`, tc.tenant, session, tc.raise); paused.Resume != want {
				t.Errorf("resume = %q, want %q", paused.Resume, want)
			}
			if turns < tc.minTurns {
				t.Errorf("paused after %d turns, want at least %d", turns, tc.minTurns)
			}
			if tc.tenant == "sandbox" {
				// One call a turn: the budget (1 s) is checked before each
				// turn, so the session pauses right after the result that
				// takes its calls' time to it.
				var spent, last int64
				for _, ev := range p.events(t, session) {
					if r, ok := ev.(*event.ToolCompleted); ok {
						spent, last = spent+r.DurationMS, r.DurationMS
					}
					if _, ok := ev.(*event.SessionPaused); ok {
						break
					}
				}
				if spent < 1000 || spent-last >= 1000 {
					t.Errorf("paused with %d ms of calls, %d ms before its last result; want it paused by the result that reached 1000 ms", spent, spent-last)
				}
			}
			// The sandbox keeps the workspace, and the call out runs on:
			// its result is recorded after the pause.
			if _, err := os.Stat(p.workspaceOf(tc.tenant, session)); err != nil {
				t.Errorf("the paused session's workspace is gone: %v", err)
			}
			if tc.tenant == "waiting" {
				natstest.WaitFor(t, 15*time.Second, func() error {
					seen := false
					for _, ev := range p.events(t, session) {
						switch ev.(type) {
						case *event.SessionPaused:
							seen = true
						case *event.ToolCompleted:
							if seen {
								return nil
							}
						}
					}
					return fmt.Errorf("no result recorded after the pause")
				})
			}
		})
	}

	t.Run("daily", func(t *testing.T) {
		paused, _, turns := p.budgetPause(t, "daily", "ada", "true")
		if paused.Budget != "user_daily.steps" || turns < 3 {
			t.Errorf("first session: %q after %d turns", paused.Budget, turns)
		}
		// Ada's next session today pauses before the model is asked;
		// Bob, of the same tenant, still has his day.
		paused, session, turns := p.budgetPause(t, "daily", "ada", "true")
		if paused.Budget != "user_daily.steps" || turns != 0 {
			t.Errorf("ada's second session: %q after %d turns, want user_daily.steps after 0", paused.Budget, turns)
		}
		if want := "then go on with: corral run --tenant daily --session " + session.String(); !strings.Contains(paused.Resume, want) {
			t.Errorf("resume = %q, want it to say %q: no raise lifts a user's day", paused.Resume, want)
		}
		paused, _, turns = p.budgetPause(t, "daily", "bob", "true")
		if paused.Budget != "user_daily.steps" || turns < 3 {
			t.Errorf("bob's session: %q after %d turns", paused.Budget, turns)
		}
		// Usage is counted from the logs a moment after it is spent.
		natstest.WaitFor(t, 10*time.Second, func() error {
			code, stdout, stderr := p.corral(t, "usage", "--tenant", "daily")
			if code != 0 {
				return fmt.Errorf("corral usage exited %d: %s", code, stderr)
			}
			for _, want := range []string{"daily", "(all)", "ada", "bob"} {
				if !strings.Contains(stdout, want) {
					return fmt.Errorf("corral usage lacks %q:\n%s", want, stdout)
				}
			}
			return nil
		})
	})

	// The tenant's day fails the session, and its sandbox is destroyed.
	t.Run("tenant daily", func(t *testing.T) {
		session, evs, stderr := p.budgetRun(t, "team", "ada", "true")
		var failed *event.SessionFailed
		for _, ev := range evs {
			switch e := ev.(type) {
			case *event.SessionFailed:
				failed = e
			case *event.SessionPaused:
				t.Errorf("the session paused over %s, want the tenant's day to fail it", e.Budget)
			}
		}
		if failed == nil || failed.Code != event.CodeBudget || failed.Budget != "tenant_daily.steps" || turnsOf(evs) != 3 {
			t.Fatalf("failure %+v after %d turns, want tenant_daily.steps after 3", failed, turnsOf(evs))
		}
		wantIn(t, "corral run", stderr, "budget_exceeded", "tenant_daily.steps")
		natstest.WaitFor(t, 10*time.Second, func() error {
			if _, err := os.Stat(p.workspaceOf("team", session)); !os.IsNotExist(err) {
				return fmt.Errorf("sandbox workspace still there: %v", err)
			}
			return nil
		})
	})
}

// remember writes a file in its first turn and reads it back in its
// second; then it answers with what it read.
func remember(c modeltest.Conversation) (modeltest.Turn, error) {
	switch modeltest.Turns(c) {
	case 0:
		return modeltest.Turn{Calls: []modeltest.Call{bash("echo kept > /workspace/note.txt")}}, nil
	case 1:
		return modeltest.Turn{Calls: []modeltest.Call{bash("cat /workspace/note.txt")}}, nil
	}
	var read []string
	for _, r := range modeltest.Results(c) {
		read = append(read, strings.TrimSpace(r.Content))
	}
	return modeltest.Turn{Text: "read: " + strings.Join(read, " | ")}, nil
}

// A session paused over its token budget keeps its sandbox and workspace.
// corral run says what to run; a follow-up finds it still over; once a
// reviewer approves corral raise, it goes on where it was, with no new
// request, and completes in the same workspace.
func TestBudgetRaiseResumesAPausedSession(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(budgetPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startDev(t, remember, map[string]string{"CORRAL_POLICY_FILE": file})
	paused, session, turns := p.budgetPause(t, "raise", "ada", "remember")
	if paused.Budget != "session.tokens" || turns != 1 {
		t.Fatalf("paused over %q after %d turns, want session.tokens after 1", paused.Budget, turns)
	}
	raise := fmt.Sprintf(`corral raise --tenant raise %s --tokens 200 --reason "why the session needs more"`, session)
	if paused.Resume != raise {
		t.Errorf("resume = %q, want %q", paused.Resume, raise)
	}
	note := filepath.Join(p.workspaceOf("raise", session), "note.txt")
	if b, err := os.ReadFile(note); err != nil || string(b) != "kept\n" {
		t.Fatalf("the paused session's workspace file: %q, %v", b, err)
	}

	// Unapproved, the raise changes nothing: a follow-up finds the
	// session still over its budget, and says so.
	code, stdout, stderr := p.corral(t, "raise", "--tenant", "raise", session.String(), "--tokens", "1000000", "--reason", "it needs to read its note")
	if code != 0 {
		t.Fatalf("corral raise exited %d: %s", code, stderr)
	}
	wantIn(t, "corral raise", stdout, `{"tokens":1000000}`)
	id, listing := p.pending(t, "raise")
	wantIn(t, "corral approvals", listing, "budget", "budget-raise")
	code, _, stderr = p.corral(t, "run", "--tenant", "raise", "--user", "ada", "--session", session.String(), "go on")
	if code != 1 || turnsOf(p.events(t, session)) != 1 {
		t.Fatalf("follow-up before approval: exit %d, %d turns: %s", code, turnsOf(p.events(t, session)), stderr)
	}
	wantIn(t, "corral run --session", stderr, "is paused over its budget session.tokens", raise)

	if code, _, stderr := p.corral(t, "approve", "--tenant", "raise", "--user", "grace", id.String()); code != 0 {
		t.Fatalf("corral approve exited %d: %s", code, stderr)
	}
	var done *event.SessionCompleted
	natstest.WaitFor(t, 30*time.Second, func() error {
		for _, ev := range p.events(t, session) {
			if e, ok := ev.(*event.SessionCompleted); ok {
				done = e
				return nil
			}
		}
		return fmt.Errorf("the session has not completed yet")
	})
	if done.Answer != "read: kept" || done.Turns != 3 {
		t.Errorf("answer %q after %d turns, want %q after 3", done.Answer, done.Turns, "read: kept")
	}
	requests, resumed := 0, 0
	for _, ev := range p.events(t, session) {
		switch e := ev.(type) {
		case *event.SessionRequested:
			requests++
		case *event.SessionResumed:
			resumed++
			if e.Raise != id || e.Reviewer != "grace" {
				t.Errorf("resumed by %s's approval of %s, want grace's of %s", e.Reviewer, e.Raise, id)
			}
		}
	}
	if requests != 2 || resumed != 1 {
		t.Errorf("%d requests and %d resumptions, want the run and its follow-up, and one", requests, resumed)
	}
	// The log tells the story.
	code, stdout, stderr = p.corral(t, "logs", "--tenant", "raise", session.String())
	if code != 0 {
		t.Fatalf("corral logs exited %d: %s", code, stderr)
	}
	wantIn(t, "corral logs", stdout, "session.paused", "budget=session.tokens", "session.resumed", "reviewer=grace", "session.completed")
	if code, _, stderr := p.corral(t, "raise", session.String(), "--reason", "x"); code != 2 || !strings.Contains(stderr, "--steps") {
		t.Errorf("raise naming no cap: exit %d: %s", code, stderr)
	}
}

// A follow-up the harness cannot take (an unknown model) ends `corral run
// --session` with the reason, instead of leaving it waiting.
func TestFollowUpWithAnUnknownModelEnds(t *testing.T) {
	p := startDev(t, byPrompt(map[string][]modeltest.Call{"hello": nil}), nil)
	code, _, stderr := p.corral(t, "run", "--tenant", "acme", "hello")
	if code != 0 {
		t.Fatalf("corral run exited %d: %s", code, stderr)
	}
	session := sessionOf(t, stderr)
	code, _, stderr = p.corral(t, "run", "--tenant", "acme", "--session", session.String(), "--model", "mystery:x", "hello")
	if code != 1 || !strings.Contains(stderr, "unknown_model") {
		t.Errorf("follow-up with an unknown model: exit %d: %s", code, stderr)
	}
}

// A session that completes within its wall time stays completed: the
// harness's wall-time watch reads the log before it stops anything.
func TestCompletedSessionOutlivesItsWallTime(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte("budgets: {session: {wall_time: 1s}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startDev(t, byPrompt(map[string][]modeltest.Call{"quick": {bash("true")}}), map[string]string{"CORRAL_POLICY_FILE": file})
	code, _, stderr := p.corral(t, "run", "--tenant", "acme", "quick")
	if code != 0 {
		t.Fatalf("corral run exited %d: %s", code, stderr)
	}
	session := sessionOf(t, stderr)
	time.Sleep(2500 * time.Millisecond) // past the wall time, twice the watch's period
	evs := p.events(t, session)
	if _, ok := evs[len(evs)-1].(*event.SessionCompleted); !ok {
		t.Errorf("the session's last event is %T, want it completed", evs[len(evs)-1])
	}
	if _, err := os.Stat(filepath.Join(p.data, "workspaces", "acme", session.String())); err != nil {
		t.Errorf("the completed session's workspace is gone: %v", err)
	}
}
