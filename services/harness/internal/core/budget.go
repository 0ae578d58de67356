package core

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

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

// SessionLimits returns the session's caps: its tenant's, lowered by the
// session's own (a cap above its tenant's counts as the tenant's), with
// each raise a reviewer approved applied in turn. A raise counts only on
// a decision that verifies, as for a held call.
func SessionLimits(st *State, env Env) policy.Limits {
	l := env.Policy.Budgets(st.Tenant).Session.Lower(st.Budget)
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

// Elapsed is how long the session has worked on its request at now: the
// time since the request came, less the time it spent paused; for a
// session paused now, up to its pause. The wall-time budget measures it,
// so that waiting for a reviewer's raise costs a session none of it.
func Elapsed(st *State, now time.Time) time.Duration {
	if st.Status == StatusPaused && st.Paused != nil {
		now = st.Paused.Time
	}
	return now.Sub(st.Since)
}

// CodeBudget is the failure of a session over its tenant's daily budget.
const CodeBudget = event.CodeBudget

// Pause pauses the session over a budget it used up, Budget (as
// <scope>.<limit>), for Reason. The session keeps its conversation, its
// pending calls and its sandbox, and waits for a reviewer to raise its
// caps. Usage is what the session spent, WallTime how long it worked on
// its request ([Elapsed]), and Limits the caps of the budget's scope now
// in force (the session's, raised, or its user's daily ones).
type Pause struct {
	Budget, Reason string
	Usage          policy.Usage
	WallTime       time.Duration
	Limits         policy.Limits
}

// Resume ends a session's pause: Reviewer approved the raise Raise since
// the session paused, and it is over none of its budgets now. The step
// then goes on where the session was: its pending calls dispatched, or
// the model asked.
type Resume struct {
	Raise    uuid.UUID
	Reviewer string
}

// overBudget returns what becomes of a session that has used up a budget:
// a [Fail] over its tenant's daily budget, which ends it, and a [Pause]
// over any other; or nil when it may go on. asking is whether the model
// is about to be asked (steps count turns).
func overBudget(st *State, env Env, asking bool) Action {
	b := env.Policy.Budgets(st.Tenant)
	b.Session = SessionLimits(st, env)
	if !asking {
		b.Session.Steps, b.UserDaily.Steps, b.TenantDaily.Steps = 0, 0, 0
	}
	// The tenant's day first: whatever else a session is over, that ends
	// it.
	if b.TenantDaily != (policy.Limits{}) {
		if limit, spent := b.TenantDaily.Over(env.TenantDay, 0); limit != "" {
			budget := "tenant_daily." + limit
			return Fail{Code: CodeBudget, Budget: budget, Reason: fmt.Sprintf("the session exceeded its budget %s: it used %s today (the tenant's daily budget is the policy's budgets.tenant_daily, which an operator raises in the policy file; the tenant's day starts again at 00:00 UTC)", budget, spent)}
		}
	}
	usage, elapsed := SessionUsage(st, env.Policy), Elapsed(st, env.Now)
	if limit, spent := b.Session.Over(usage, elapsed); limit != "" {
		return pause("session."+limit, spent, usage, elapsed, b.Session)
	}
	if b.UserDaily != (policy.Limits{}) {
		if limit, spent := b.UserDaily.Over(env.UserDay, 0); limit != "" {
			return pause("user_daily."+limit, spent+" today", usage, elapsed, b.UserDaily)
		}
	}
	return nil
}

// WallTimeEnds returns when a running session runs out of its wall-time
// budget, as far as its state says: zero if it is not running or has no
// such budget. Until a step changes it, [OverWallTime] holds from then
// on and not before.
func WallTimeEnds(st *State, env Env) time.Time {
	if st.Status != StatusRunning {
		return time.Time{}
	}
	l := SessionLimits(st, env)
	if l.WallTime <= 0 {
		return time.Time{}
	}
	return st.Since.Add(l.WallTime)
}

// OverWallTime returns the pause of a running session past its wall-time
// budget at env.Now, or nil.
func OverWallTime(st *State, env Env) *Pause {
	if st.Status != StatusRunning {
		return nil
	}
	l := SessionLimits(st, env)
	elapsed := Elapsed(st, env.Now)
	if l.WallTime <= 0 || elapsed < l.WallTime {
		return nil
	}
	p := pause("session.wall_time", fmt.Sprintf("%s of %s", elapsed.Round(time.Second), l.WallTime), SessionUsage(st, env.Policy), elapsed, l)
	return &p
}

func pause(budget, spent string, usage policy.Usage, elapsed time.Duration, l policy.Limits) Pause {
	return Pause{
		Budget:   budget,
		Reason:   fmt.Sprintf("the session went over its budget %s: it used %s", budget, spent),
		Usage:    usage,
		WallTime: elapsed,
		Limits:   l,
	}
}

// unpause returns what a step of a paused session does: nothing, unless a
// reviewer approved a raise of its caps since it paused. Then it resumes
// if it is over none of its budgets, checked as the step it paused at
// checks them; else it pauses again, saying which budget it is still over
// (or fails, over its tenant's daily budget). A raise denied leaves it as
// it is.
func unpause(st *State, env Env) []Action {
	var by *event.ApprovalDecided
	for _, d := range st.Unpause {
		if dec := raiseDecision(st, env, d.Call); dec == d && dec.Approved {
			by = dec
		}
	}
	if by == nil {
		return nil
	}
	if a := overBudget(st, env, false); a != nil {
		return []Action{a}
	}
	// The model is asked next, unless the workspace is being prepared or
	// calls of the turn have yet to run: only then do steps count.
	asking := (st.Prepare == uuid.Nil || st.Prepared != nil) && len(st.Missing()) == 0
	if asking {
		if a := overBudget(st, env, true); a != nil {
			return []Action{a}
		}
	}
	return []Action{Resume{Raise: by.Call, Reviewer: by.Reviewer}}
}

// raiseDecision returns the decision that counts on raise id: the first
// that verifies, for the limits the raise asked for.
func raiseDecision(st *State, env Env, id uuid.UUID) *event.ApprovalDecided {
	for _, r := range st.Raises {
		if r.Raise != id {
			continue
		}
		if d := decision(st, env, id, event.ArgsHash(event.BudgetTool, r.Limits)); d != nil {
			return d
		}
	}
	return nil
}

// pause folds in a session's pause over a budget. A pause recorded after
// the session ended (a stop that came while it was being recorded) ends
// nothing more.
func (st *State) pause(e *event.SessionPaused) {
	st.Pauses++
	if st.Status != StatusRunning && st.Status != StatusPaused {
		return
	}
	st.Status, st.Paused, st.Unpause = StatusPaused, e, nil
}

// resume folds in the end of a pause: the time the session spent paused
// does not count against its wall time.
func (st *State) resume(e *event.SessionResumed) {
	if st.Status != StatusPaused || st.Paused == nil {
		return
	}
	st.Since = st.Since.Add(e.Time.Sub(st.Paused.Time))
	st.Status, st.Paused, st.Unpause = StatusRunning, nil, nil
}

// followUpPaused folds in what a follow-up request does to a paused
// session: it goes on from where it was, as a new request with wall time
// of its own (its next step pauses it again if it is still over a
// budget).
func (st *State) followUpPaused(e *event.SessionRequested) {
	if st.Status == StatusPaused {
		st.Status, st.Since = StatusRunning, e.Time
	}
	st.Paused, st.Unpause = nil, nil
}

// raiseDecided notes a decision on a raise of a paused session's caps: the
// step it triggers may resume the session.
func (st *State) raiseDecided(e *event.ApprovalDecided) {
	if st.Status != StatusPaused {
		return
	}
	if slices.ContainsFunc(st.Raises, func(r *event.BudgetRaise) bool { return r.Raise == e.Call }) {
		st.Unpause = append(st.Unpause, e)
	}
}
