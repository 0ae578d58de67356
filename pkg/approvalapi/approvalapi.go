// Package approvalapi is the contract of the approval service's
// request/reply API: what an approval is, the requests that list and
// decide them, and the subjects they go on. Clients (the CLI, the Slack
// bridge) import it without importing the service.
package approvalapi

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
)

// Statuses of an [Approval].
const (
	Pending   = "pending"
	Approved  = "approved"
	Denied    = "denied"
	Cancelled = "cancelled" // its session stopped or failed first
)

// Approval is one call waiting for, or given, a reviewer's decision, as
// kept in the approvals bucket under <tenant>.<session>.<call>.
type Approval struct {
	ID       uuid.UUID       `json:"id"` // the call's ID
	Tenant   string          `json:"tenant"`
	Session  uuid.UUID       `json:"session"`
	Turn     int             `json:"turn"`
	User     string          `json:"user"`
	Tool     string          `json:"tool"`
	Input    json.RawMessage `json:"input"`
	ArgsHash string          `json:"args_hash"`
	Rule     string          `json:"rule"`
	Why      string          `json:"why"`
	// Preview is the preview of the change, informational only
	// ([event.ApprovalRequested.Preview]): a decision approves Tool and
	// Input.
	Preview string `json:"preview,omitempty"`
	// Prompt and Steps are the session's context when it asked: the
	// request it is working on and what it did last.
	Prompt      string     `json:"prompt"`
	Steps       []Step     `json:"steps,omitempty"`
	RequestedAt time.Time  `json:"requested_at"`
	ExpiresAt   *time.Time `json:"expires_at,omitempty"`

	Status    string    `json:"status"`
	Reviewer  string    `json:"reviewer,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	DecidedAt time.Time `json:"decided_at,omitzero"`
	// Decision is the decision as signed when it was made: what is
	// published, and only if its signature verifies, so that an entry
	// written into the bucket by anyone else publishes nothing. Published
	// is set once it is in the session's log.
	Decision  *event.ApprovalDecided `json:"decision,omitempty"`
	Published bool                   `json:"published,omitempty"`
}

// Step is one thing the session did before it asked.
type Step struct {
	Tool    string `json:"tool"`
	Summary string `json:"summary"`
	Result  string `json:"result,omitempty"`
	IsError bool   `json:"is_error,omitempty"`
}

// Subject is where a client acting as user of tenant calls operation op
// of the approval API ([bus.OpList] or [bus.OpDecide]):
//
//	corral.approval.<tenant>.<user token>.<op>
//
// with the user as a [bus.UserToken]. Each request takes and returns
// JSON. The service takes tenant and user from the subject, never from
// the body: the NATS permissions let a client publish only for its own
// tenant (a user's credential only as its own user), and only reviewer
// credentials and the Slack bridge may publish a decide, so the subject
// says whose approvals a request sees and who decides.
func Subject(tenant, user, op string) string {
	return bus.ApprovalAPI(tenant, bus.UserToken(user), op)
}

// ListRequest asks for the approvals of the subject's tenant: pending
// ones, or with All every one kept. Tenant may be left empty; a request
// naming another tenant than its subject's is refused.
type ListRequest struct {
	Tenant string `json:"tenant,omitempty"`
	All    bool   `json:"all,omitempty"`
}

// DecideRequest decides an approval of the subject's tenant, in the name
// of the subject's user. Session is needed only when the ID alone is
// ambiguous (a raise's ID, which its asker picks, may be in more than one
// session).
type DecideRequest struct {
	ID      uuid.UUID `json:"id"`
	Session uuid.UUID `json:"session,omitzero"`
	Approve bool      `json:"approve"`
	Reason  string    `json:"reason,omitempty"`
}

// Response is the answer to either request.
type Response struct {
	Approvals []*Approval `json:"approvals"`
}

// Error codes of the API, in the Nats-Service-Error-Code header.
const (
	CodeBadRequest = "400"
	CodeNotFound   = "404"
	CodeDecided    = "409"
)
