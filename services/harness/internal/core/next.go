package core

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/event"
	"corral.dev/pkg/model"
	"corral.dev/pkg/policy"
	"corral.dev/pkg/tool"
)

const serviceSandbox = tool.ServiceSandbox

// Env is what a step knows of the world besides the session's log.
type Env struct {
	// Policy decides which calls run, which wait for a reviewer, which
	// are refused, and the session's budgets and prices.
	Policy *policy.Policy
	// ApprovalKey verifies reviewers' decisions; with none, a call the
	// policy holds for a reviewer is refused.
	ApprovalKey ed25519.PublicKey
	// MaxTurns bounds the model responses of a session.
	MaxTurns int
	// Now is the time of the step, for the wall-time budget.
	Now time.Time
	// UserDay and TenantDay are what the session's user and tenant spent
	// today, for the daily budgets; they are read only when those are set
	// (see [DailyBudgets]).
	UserDay, TenantDay policy.Usage
	// RequeueAfter is the sequence after which a call recorded as
	// dispatched may not have been queued: the sequence of the step's
	// trigger (a run of it, or of a trigger before it that is redelivered
	// in turn, may have died between recording and queueing). Calls
	// recorded after it are queued again; the duplicate window drops the
	// copy of one that made it. [NoRequeue] queues none again.
	RequeueAfter uint64
	// Asked is set once the step has asked the model: the response's costs
	// are checked against the budgets at the next step, once its calls ran.
	Asked bool
	// Ignored, when set, hears of each decision that does not verify.
	Ignored func(dec *event.ApprovalDecided, err error)
	// Context is the session's model's context window: the conversation
	// is compacted before a request would not fit (see [Compact]).
	Context Context
}

// NoRequeue is [Env.RequeueAfter] for a step with no trigger.
const NoRequeue = math.MaxUint64

// An Action is one thing a step does. Next returns them in the order
// they are to be done.
type Action interface{ action() }

// AskModel asks the model for the session's next turn, with Messages.
type AskModel struct{ Messages []model.Message }

// Dispatch puts a call on the queue of Service (on MemPath, for the
// memory service), recording first that it was dispatched unless
// Recorded: a call recorded as dispatched is queued again, as it would be
// queued now.
type Dispatch struct {
	Call             event.Call
	Service, MemPath string
	Recorded         bool
}

// RecordDispatched records that a call was dispatched to Service, which a
// harness of an earlier version put on the queue and died before recording
// it: every call that ran shows in the log as dispatched.
type RecordDispatched struct {
	Call    event.Call
	Service string
}

// Hold asks a reviewer about a call the policy holds under Rule, for
// Reason, unless Asked already; the call waits for the decision.
type Hold struct {
	Call                           event.Call
	Service, MemPath, Rule, Reason string
	Asked                          bool
}

// Refuse records a call's result as an error saying why it did not run.
type Refuse struct {
	Call   event.Call
	Reason string
}

// Prepare puts the call that prepares the session's workspace on the
// sandbox-manager's queue, recording first that it was dispatched unless
// Recorded (as for [Dispatch]).
type Prepare struct {
	Call     uuid.UUID
	Input    event.PrepareInput
	Recorded bool
}

// Complete records the session's answer: the model's last response,
// which made no call.
type Complete struct{ Answer string }

// Fail ends the session with a failure: Code, and Budget for a budget it
// used up (the tenant's daily budget: the others pause it, see [Pause]).
type Fail struct{ Code, Reason, Budget string }

func (AskModel) action()         {}
func (Dispatch) action()         {}
func (RecordDispatched) action() {}
func (Hold) action()             {}
func (Refuse) action()           {}
func (Prepare) action()          {}
func (Complete) action()         {}
func (Fail) action()             {}
func (Pause) action()            {}
func (Resume) action()           {}

// CodeTurnLimit is the failure of a session that reached its turn limit.
const CodeTurnLimit = "turn_limit"

// Next returns what a step of the session does now: nothing for a session
// that is not running or waits for calls or reviewers, else its pending
// calls dispatched, held or refused, or the model asked, or the session
// completed, paused over a budget or failed; for a paused session, its
// resumption once a reviewer raised its budget (see [Resume]).
func Next(st *State, env Env) []Action {
	if st.Status == StatusPaused {
		return unpause(st, env)
	}
	if st.Status != StatusRunning {
		return nil
	}
	if st.BadBudget != nil {
		// Never run with no caps for caps that do not read.
		return []Action{Fail{Code: event.CodeInvalidRequest, Reason: st.BadBudget.Error()}}
	}
	if st.Answered == nil && !env.Asked {
		// Running calls spends; completing does not. Steps count model
		// turns: they are checked before asking, below.
		if a := overBudget(st, env, false); a != nil {
			return []Action{a}
		}
	}
	if st.Prepare != uuid.Nil {
		// Nothing is asked of the model before the workspace is ready.
		switch r := st.Prepared; {
		case r == nil:
			d, ok := st.Dispatched[st.Prepare]
			if ok && d.Seq <= env.RequeueAfter {
				return nil // on the queue: its result comes
			}
			return []Action{Prepare{Call: st.Prepare, Input: st.PrepareInput, Recorded: ok}}
		case r.IsError:
			return []Action{Fail{Code: event.CodeWorkspace, Reason: r.Output}}
		}
	}
	var acts []Action
	switch {
	case st.Pending != nil:
		if missing := st.Missing(); len(missing) > 0 {
			return dispatch(st, env, missing)
		}
		acts = backfill(st, env)
	case st.Answered != nil:
		return []Action{Complete{Answer: model.Response{Content: st.Answered.Content}.Text()}}
	}
	if st.Turn >= env.MaxTurns {
		return append(acts, Fail{Code: CodeTurnLimit, Reason: fmt.Sprintf("the session reached its limit of %d model turns (CORRAL_MAX_TURNS, in the harness's environment, raises it for every session)", env.MaxTurns)})
	}
	if a := overBudget(st, env, true); a != nil {
		return append(acts, a)
	}
	msgs, origins := st.view()
	if c := compaction(st, env, msgs, origins); c != nil {
		return append(acts, *c)
	}
	return append(acts, AskModel{Messages: msgs})
}

// dispatch decides each call not yet dispatched: to be dispatched, held
// for a reviewer, or refused; and queues again those recorded as
// dispatched after env.RequeueAfter.
func dispatch(st *State, env Env, calls []event.Call) []Action {
	var acts []Action
	for _, c := range calls {
		input := st.input(c)
		if d, ok := st.Dispatched[c.ID]; ok {
			// Queued again only as it would be queued now: the policy
			// and any reviewer's decision are applied afresh, and only
			// to a call of the harness's own recorded response.
			if d.Seq > env.RequeueAfter {
				if service, memPath, ok := allowed(st, env, c, input); ok && service == d.Service {
					acts = append(acts, Dispatch{Call: c, Service: service, MemPath: memPath, Recorded: true})
				}
			}
			continue
		}
		service, memPath, err := tool.Route(c.Name, input)
		if err == nil {
			// Refused before the policy may hold it: no reviewer is asked
			// about a call that would be refused anyway.
			err = readFirst(st, c.Name, service, memPath)
		}
		if err == nil {
			switch v := Decide(st, env, c, input); v.Verdict {
			case policy.Deny:
				err = errors.New(v.Reason)
			case policy.Approve:
				acts = append(acts, Hold{Call: c, Service: service, MemPath: memPath, Rule: v.Rule, Reason: v.Reason, Asked: st.Asked[c.ID]})
				continue // until a reviewer decides
			}
		}
		if err != nil {
			acts = append(acts, Refuse{Call: c, Reason: err.Error()})
			continue
		}
		acts = append(acts, Dispatch{Call: c, Service: service, MemPath: memPath})
	}
	return acts
}

// backfill records the dispatch of the pending calls that the policy
// allows and that have a tool service's results but were never recorded
// as dispatched: a harness of an earlier version put them on the queue
// and died before recording it. Calls the harness refused (by
// [tool.Route] or the policy, then) were never dispatched, whatever the
// policy says now: their results are the harness's own.
func backfill(st *State, env Env) []Action {
	var acts []Action
	for _, c := range st.Pending.Calls {
		if _, ok := st.Dispatched[c.ID]; ok {
			continue
		}
		if r := st.Results[c.ID]; r == nil || r.Service == "" {
			continue
		}
		if service, _, ok := allowed(st, env, c, st.input(c)); ok {
			acts = append(acts, RecordDispatched{Call: c, Service: service})
		}
	}
	return acts
}

// allowed returns the service that runs call c with input, and the memory
// or skill file it names, if it may run now as it is: it can run as
// written, is no Edit of a file the session has not read, and the policy
// (or a reviewer) allows it. Every call that goes out passes it.
func allowed(st *State, env Env, c event.Call, input json.RawMessage) (service, memPath string, ok bool) {
	service, memPath, err := tool.Route(c.Name, input)
	if err != nil || readFirst(st, c.Name, service, memPath) != nil || Decide(st, env, c, input).Verdict != policy.Allow {
		return "", "", false
	}
	return service, memPath, true
}

// readFirst refuses an Edit of a memory or skill file this session has
// neither read nor written, as the memory service would: such a file
// either does not exist (an Edit cannot create it) or has a version the
// session has not seen.
func readFirst(st *State, name, service, memPath string) error {
	if name != tool.Edit || service != tool.ServiceMemory || st.Versions[memPath] != 0 {
		return nil
	}
	return fmt.Errorf("%s: this session has not read it: Read it first (an Edit changes a file that exists, as last read), then make your change", memPath)
}

// Verdict is what may be done with a call: allow (run it), deny (refuse it
// for Reason) or approve (ask a reviewer under Rule).
type Verdict struct {
	Verdict, Rule, Reason string
}

// Decide applies the policy, tightened by the session's own configuration
// (see [State.Config]), and any reviewer's decision to a call. A
// decision counts only if it verifies: signed by the approval service, for
// this very call and these arguments; others are ignored, and told to
// env.Ignored.
func Decide(st *State, env Env, c event.Call, input json.RawMessage) Verdict {
	d := configured(st, c.Name, env.Policy.Decide(policy.Call{Tenant: st.Tenant, User: st.User, Tool: c.Name, Input: input}))
	switch d.Decision {
	case policy.Deny:
		if d.Rule == RuleTools {
			return Verdict{policy.Deny, d.Rule, d.Reason}
		}
		return Verdict{policy.Deny, d.Rule, fmt.Sprintf("refused by policy (rule %s): %s", d.Rule, d.Reason)}
	case policy.Approve:
		if env.ApprovalKey == nil {
			return Verdict{policy.Deny, d.Rule, fmt.Sprintf("this call needs a reviewer's approval under policy rule %s (%s), and this deployment takes no approvals, so it was not run", d.Rule, d.Reason)}
		}
		dec := decision(st, env, c.ID, event.ArgsHash(c.Name, input))
		switch {
		case dec == nil:
			return Verdict{policy.Approve, d.Rule, d.Reason}
		case dec.Approved:
			return Verdict{policy.Allow, d.Rule, ""}
		}
		why := dec.Reason
		if why == "" {
			why = "no reason given"
		}
		return Verdict{policy.Deny, d.Rule, fmt.Sprintf("a reviewer (%s) denied this call, held under policy rule %s: %s", dec.Reviewer, d.Rule, why)}
	}
	return Verdict{policy.Allow, d.Rule, ""}
}

// decision returns the first decision recorded on approval id that
// verifies: signed by the approval service, for this session and id and
// arguments hashing to hash.
func decision(st *State, env Env, id uuid.UUID, hash string) *event.ApprovalDecided {
	for _, dec := range st.Decisions[id] {
		if err := dec.Verify(env.ApprovalKey, st.Tenant, st.Session, id, hash); err != nil {
			if env.Ignored != nil {
				env.Ignored(dec, err)
			}
			continue
		}
		return dec
	}
	return nil
}
