package core

import (
	"encoding/json"
	"fmt"

	"corral.dev/pkg/event"
	"corral.dev/pkg/policy"
)

// SessionUsage is what the session has spent, by its log, priced by pol.
func SessionUsage(st *State, pol *policy.Policy) policy.Usage {
	u := policy.Usage{
		Steps:            st.Turn,
		InputTokens:      int64(st.Usage.InputTokens),
		OutputTokens:     int64(st.Usage.OutputTokens),
		CacheReadTokens:  int64(st.Usage.CacheReadTokens),
		CacheWriteTokens: int64(st.Usage.CacheWriteTokens),
		SandboxSeconds:   float64(st.SandboxMS) / 1000,
	}
	for m, mu := range st.ByModel {
		u.CostUSD += pol.Cost(m, mu)
	}
	return u
}

// SessionLimits returns the session's caps: its tenant's, with each raise
// a reviewer approved applied in turn. A raise counts only on a decision
// that verifies, as for a held call.
func SessionLimits(st *State, env Env) policy.Limits {
	l := env.Policy.Budgets(st.Tenant).Session
	for _, r := range st.Raises {
		d := decision(st, env, r.Raise, event.ArgsHash(event.BudgetTool, r.Limits))
		var raised policy.Limits
		if d != nil && d.Approved && json.Unmarshal(r.Limits, &raised) == nil {
			l = l.Raise(raised)
		}
	}
	return l
}

// DailyBudgets reports whether the session's user's and its tenant's
// daily budgets are set: only then does a step need what they spent today
// ([Env.UserDay], [Env.TenantDay]).
func DailyBudgets(st *State, pol *policy.Policy) (user, tenant bool) {
	b := pol.Budgets(st.Tenant)
	return b.UserDaily != (policy.Limits{}), b.TenantDaily != (policy.Limits{})
}

// CodeBudget is the failure of a session over a budget.
const CodeBudget = event.CodeBudget

// overBudget returns the failure of a session that has used up a budget,
// or nil when it may go on; asking is whether the model is about to be
// asked (steps count turns).
func overBudget(st *State, env Env, asking bool) *Fail {
	b := env.Policy.Budgets(st.Tenant)
	b.Session = SessionLimits(st, env)
	if !asking {
		b.Session.Steps, b.UserDaily.Steps, b.TenantDaily.Steps = 0, 0, 0
	}
	if limit, spent := b.Session.Over(SessionUsage(st, env.Policy), env.Now.Sub(st.Since)); limit != "" {
		return overFail("session."+limit, spent)
	}
	for _, d := range []struct {
		scope string
		l     policy.Limits
		u     policy.Usage
	}{{"user_daily", b.UserDaily, env.UserDay}, {"tenant_daily", b.TenantDaily, env.TenantDay}} {
		if d.l == (policy.Limits{}) {
			continue
		}
		if limit, spent := d.l.Over(d.u, 0); limit != "" {
			return overFail(d.scope+"."+limit, spent+" today")
		}
	}
	return nil
}

// OverWallTime returns the failure of a running session past its wall-time
// budget at env.Now, or nil.
func OverWallTime(st *State, env Env) *Fail {
	if st.Status != StatusRunning {
		return nil
	}
	wall := SessionLimits(st, env).WallTime
	elapsed := env.Now.Sub(st.Since)
	if wall <= 0 || elapsed < wall {
		return nil
	}
	return overFail("session.wall_time", fmt.Sprintf("%s of %s", elapsed.Round(1e9), wall))
}

func overFail(budget, spent string) *Fail {
	return &Fail{Code: CodeBudget, Budget: budget, Reason: fmt.Sprintf("the session exceeded its budget %s: it used %s", budget, spent)}
}
