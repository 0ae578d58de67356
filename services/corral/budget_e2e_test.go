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
  raise:   {budgets: {session: {steps: 3}}}
  tokens:  {budgets: {session: {tokens: 3000}}}
  cost:    {budgets: {session: {cost_usd: 2}}}
  sandbox: {budgets: {session: {sandbox_seconds: 1}}}
  wall:    {budgets: {session: {wall_time: 2s}}}
  waiting: {budgets: {session: {wall_time: 2s}}}
  daily:   {budgets: {user_daily: {steps: 3}}}
  team:    {budgets: {tenant_daily: {steps: 3}}}
`

// budgetFailure runs a session of tenant as user and returns its failure.
func (p *platform) budgetFailure(t *testing.T, tenant, user, prompt string) (*event.SessionFailed, uuid.UUID, int) {
	t.Helper()
	code, _, stderr := p.corral(t, "run", "--tenant", tenant, "--user", user, prompt)
	if code != 1 {
		t.Fatalf("corral run in %s exited %d, want 1:\n%s", tenant, code, stderr)
	}
	session := sessionOf(t, stderr)
	evs := p.events(t, session)
	turns := 0
	var failed *event.SessionFailed
	for _, ev := range evs {
		switch e := ev.(type) {
		case *event.ModelResponded:
			turns++
		case *event.SessionFailed:
			failed = e
		}
	}
	if failed == nil {
		t.Fatalf("session in %s did not fail", tenant)
	}
	if !strings.Contains(stderr, "budget_exceeded") || !strings.Contains(stderr, failed.Budget) {
		t.Errorf("corral run did not tell the requester which budget: %s", stderr)
	}
	return failed, session, turns
}

func TestBudgetsStopSessions(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(budgetPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startDev(t, forever, map[string]string{"CORRAL_POLICY_FILE": file})

	for _, tc := range []struct {
		tenant, prompt, budget string
		minTurns               int
	}{
		// The harness's own tests cover the budgets it counts alone
		// (steps, tokens, cost, daily); these need the sandbox.
		{"sandbox", "sleep 0.2", "session.sandbox_seconds", 3},
		{"wall", "sleep 0.7", "session.wall_time", 2},
		// Over its wall time while a call runs: stopped there, the call
		// killed.
		{"waiting", "sleep 60", "session.wall_time", 1},
	} {
		t.Run(tc.tenant, func(t *testing.T) {
			t.Parallel()
			failed, session, turns := p.budgetFailure(t, tc.tenant, "ada", tc.prompt)
			if failed.Code != event.CodeBudget || failed.Budget != tc.budget {
				t.Errorf("failed with %s %q: %s, want %s", failed.Code, failed.Budget, failed.Reason, tc.budget)
			}
			if turns < tc.minTurns {
				t.Errorf("stopped after %d turns, want at least %d", turns, tc.minTurns)
			}
			ws := filepath.Join(p.data, "workspaces", tc.tenant, session.String())
			natstest.WaitFor(t, 10*time.Second, func() error {
				if _, err := os.Stat(ws); !os.IsNotExist(err) {
					return fmt.Errorf("sandbox workspace still there: %v", err)
				}
				return nil
			})
		})
	}

	t.Run("daily", func(t *testing.T) {
		failed, _, turns := p.budgetFailure(t, "daily", "ada", "true")
		if failed.Budget != "user_daily.steps" || turns < 3 {
			t.Errorf("first session: %q after %d turns", failed.Budget, turns)
		}
		// Ada's next session today is refused before the model is asked;
		// Bob, of the same tenant, still has his day.
		failed, _, turns = p.budgetFailure(t, "daily", "ada", "true")
		if failed.Budget != "user_daily.steps" || turns != 0 {
			t.Errorf("ada's second session: %q after %d turns, want user_daily.steps after 0", failed.Budget, turns)
		}
		failed, _, turns = p.budgetFailure(t, "daily", "bob", "true")
		if failed.Budget != "user_daily.steps" || turns < 3 {
			t.Errorf("bob's session: %q after %d turns", failed.Budget, turns)
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
}

func TestBudgetRaiseGoesToAReviewer(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(budgetPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startDev(t, forever, map[string]string{"CORRAL_POLICY_FILE": file})
	failed, session, turns := p.budgetFailure(t, "raise", "ada", "true")
	if failed.Budget != "session.steps" || turns != 3 {
		t.Fatalf("%q after %d turns", failed.Budget, turns)
	}
	turnsNow := func() int {
		n := 0
		for _, ev := range p.events(t, session) {
			if _, ok := ev.(*event.ModelResponded); ok {
				n++
			}
		}
		return n
	}
	cont := func() (int, string) {
		code, _, stderr := p.corral(t, "run", "--tenant", "raise", "--user", "ada", "--session", session.String(), "go on")
		return code, stderr
	}

	// Unapproved, the raise changes nothing.
	code, stdout, stderr := p.corral(t, "raise", "--tenant", "raise", session.String(), "--steps", "5", "--reason", "the migration needs more turns")
	if code != 0 {
		t.Fatalf("corral raise exited %d: %s", code, stderr)
	}
	wantIn(t, "corral raise", stdout, `{"steps":5}`)
	id, listing := p.pending(t, "raise")
	wantIn(t, "corral approvals", listing, "budget", "budget-raise")
	if code, stderr := cont(); code != 1 || !strings.Contains(stderr, "session.steps") || turnsNow() != 3 {
		t.Fatalf("follow-up before approval: exit %d, %d turns: %s", code, turnsNow(), stderr)
	}

	if code, _, stderr := p.corral(t, "approve", "--tenant", "raise", "--user", "grace", id.String()); code != 0 {
		t.Fatalf("corral approve exited %d: %s", code, stderr)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		for _, ev := range p.events(t, session) {
			if d, ok := ev.(*event.ApprovalDecided); ok && d.Call == id {
				return nil
			}
		}
		return fmt.Errorf("no decision in the log yet")
	})
	code, stderr = cont()
	if code != 1 || !strings.Contains(stderr, "session.steps") {
		t.Fatalf("follow-up after approval: exit %d: %s", code, stderr)
	}
	if n := turnsNow(); n != 5 {
		t.Errorf("%d turns after the raise to 5 steps, want 5", n)
	}
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
