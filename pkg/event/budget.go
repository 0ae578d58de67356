package event

import (
	"encoding/json"

	"github.com/google/uuid"
)

// BudgetRaise asks a reviewer to raise a session's caps (corral raise).
// It goes to the approval service like a held call, with Raise as the
// approval's ID; once a verified decision approves it, the harness applies
// Limits over the session's own budget, and a follow-up request goes on
// under them. Schema: schemas/budget/v1/raise.json.
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
