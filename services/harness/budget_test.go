package harness

import (
	"testing"

	"github.com/google/uuid"

	"corral.dev/pkg/event"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
	"corral.dev/services/harness/internal/core"
)

// forever is a model that never stops: every turn it makes a Bash call.
func forever(modeltest.Conversation) (modeltest.Turn, error) {
	return modeltest.Turn{Calls: []modeltest.Call{bashCall("true")}}, nil
}

// turns counts the model's responses in a session's log.
func turns(evs []event.Event) int { return len(ofType[*event.ModelResponded](evs)) }

// A session over a budget of its tenant's is stopped, saying which budget
// and what it used; a user over a daily budget starts no more sessions
// that day, while another user of the tenant still may, until the
// tenant's own daily budget is spent.
func TestBudgetsStopSessions(t *testing.T) {
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
	run := func(tenant, user string) (*event.SessionFailed, int) {
		t.Helper()
		session := ask(t, js, tenant, user, uuid.Must(uuid.NewV7()), "", "go on forever")
		evs := ended(t, js, tenant, session, 1)
		return failure(t, evs), turns(evs)
	}
	for _, tc := range []struct {
		tenant, budget string
		minTurns       int
	}{
		{"steps", "session.steps", 3},
		{"tokens", "session.tokens", 2},
		{"cost", "session.cost_usd", 2},
	} {
		t.Run(tc.tenant, func(t *testing.T) {
			f, n := run(tc.tenant, "ada")
			if f.Code != event.CodeBudget || f.Budget != tc.budget || n < tc.minTurns {
				t.Errorf("failed with %s %q after %d turns: %s; want %s after at least %d", f.Code, f.Budget, n, f.Reason, tc.budget, tc.minTurns)
			}
			if tc.budget == "session.steps" && n != 3 {
				t.Errorf("%d turns, want 3", n)
			}
		})
	}
	t.Run("daily", func(t *testing.T) {
		if f, n := run("daily", "ada"); f.Budget != "user_daily.steps" || n != 3 {
			t.Errorf("ada's first session: %q after %d turns, want user_daily.steps after 3", f.Budget, n)
		}
		if f, n := run("daily", "ada"); f.Budget != "user_daily.steps" || n != 0 {
			t.Errorf("ada's second session: %q after %d turns, want user_daily.steps before the model is asked", f.Budget, n)
		}
		if f, n := run("daily", "bob"); f.Budget != "user_daily.steps" || n != 3 {
			t.Errorf("bob's session: %q after %d turns, want his own 3", f.Budget, n)
		}
	})
	t.Run("tenant daily", func(t *testing.T) {
		if f, n := run("team", "ada"); f.Budget != "tenant_daily.steps" || n != 3 {
			t.Errorf("ada's session: %q after %d turns, want tenant_daily.steps after 3", f.Budget, n)
		}
		if f, n := run("team", "bob"); f.Budget != "tenant_daily.steps" || n != 0 {
			t.Errorf("bob's session: %q after %d turns, want tenant_daily.steps before the model is asked", f.Budget, n)
		}
	})
}

// A session may take only so many model turns.
func TestTurnLimit(t *testing.T) {
	_, _, js := natstest.Run(t)
	runHarnessWith(t, js, modeltest.New(t, forever), map[string]string{"CORRAL_MAX_TURNS": "2"})
	startTools(t, js, output("ok"))
	session := ask(t, js, "acme", "ada", uuid.Must(uuid.NewV7()), "", "go on forever")
	evs := ended(t, js, "acme", session, 1)
	if f := failure(t, evs); f.Code != core.CodeTurnLimit || f.Reason != "the session reached its limit of 2 model turns" {
		t.Errorf("failure = %s %q", f.Code, f.Reason)
	}
	if n := turns(evs); n != 2 {
		t.Errorf("%d turns, want 2", n)
	}
	if n := len(ofType[*event.ToolCompleted](evs)); n != 2 {
		t.Errorf("%d results, want both turns' calls run", n)
	}
}
