package event

import (
	"encoding/json"

	"github.com/google/uuid"
)

// BudgetRaise asks a reviewer to raise a session's caps (corral raise).
// It goes to the approval service like a held call, with Raise as the
// approval's ID; once a verified decision approves it, the harness applies
// Limits over the session's own budget: a session paused over a budget
// goes on where it was ([SessionResumed]), and any later step runs under
// them. Schema: schemas/budget/v1/raise.json.
type BudgetRaise struct {
	Header
	Raise uuid.UUID `json:"raise"`
	// User is who asks.
	User string `json:"user"`
	// Limits are the new caps, as pkg/policy.Limits writes them; a decision
	// is bound to these very bytes.
	Limits json.RawMessage `json:"limits"`
	Reason string          `json:"reason,omitempty"`
}

// BudgetTool is the tool name a raise is approved under: its ArgsHash is
// ArgsHash(BudgetTool, Limits).
const BudgetTool = "budget"

// EgressTool is the tool name a request the egress service held is
// approved under (a git push, say): its input names the request (method,
// URL, and a push's ref updates or the body's hash), and its ArgsHash is
// ArgsHash(EgressTool, input).
const EgressTool = "egress"

// SessionPaused records that a session went over a budget and waits: it
// keeps its conversation, its pending calls and its sandbox. Calls already
// out finish, and their results wait with it. A raise a reviewer approves
// ([BudgetRaise]) lets it go on where it was ([SessionResumed]); a
// follow-up request goes on too, unless the session is still over, when
// it is paused again. Only the tenant's daily budget fails a session
// ([SessionFailed] with code budget_exceeded) rather than pausing it.
// Schema: schemas/session/v1/paused.json.
type SessionPaused struct {
	Header
	// Budget names the budget, as <scope>.<limit>: "session.tokens",
	// "user_daily.cost_usd".
	Budget string `json:"budget"`
	Reason string `json:"reason"`
	// Usage is what the session had spent when it paused.
	Usage BudgetUsage `json:"usage"`
	// Resume says what lets the session go on: for a session's cap, the
	// corral raise that asks a reviewer for more.
	Resume string `json:"resume"`
}

// BudgetUsage is what a session has spent against its budgets.
type BudgetUsage struct {
	// Steps counts its model turns.
	Steps        int   `json:"steps"`
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	// CostUSD is what its tokens cost, by the harness's price table.
	CostUSD        float64 `json:"cost_usd"`
	SandboxSeconds float64 `json:"sandbox_seconds"`
	// WallTime is how long it has worked on its request, the time it
	// spent paused left out, as a Go duration ("1m30s").
	WallTime string `json:"wall_time"`
}

// SessionResumed records that a paused session goes on where it was: a
// reviewer (Reviewer) approved Raise, and the session is over none of its
// budgets. The time it spent paused does not count against its wall time.
// Schema: schemas/session/v1/resumed.json.
type SessionResumed struct {
	Header
	Raise    uuid.UUID `json:"raise"`
	Reviewer string    `json:"reviewer"`
}
