package approval

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

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

func (a *Approval) key() string { return key(a.Tenant, a.Session, a.ID) }

func key(tenant string, session, call uuid.UUID) string {
	return fmt.Sprintf("%s.%s.%s", tenant, session, call)
}

// ErrNotFound is returned for an approval ID nobody asked for.
var ErrNotFound = errors.New("no such approval")

// ErrAmbiguous is returned for an approval ID found in more than one
// session (only a raise's ID, which its asker picks, can be): the session
// must be named too.
var ErrAmbiguous = errors.New("the approval ID is in more than one session: name the session too")

// ErrNoReviewer is returned for a decision through the API without a
// reviewer's token.
var ErrNoReviewer = errors.New("a decision needs a reviewer's token (CORRAL_REVIEWER_TOKEN)")

// Ref names an approval: its ID, and its session when the ID alone is
// ambiguous.
type Ref struct {
	ID      uuid.UUID
	Session uuid.UUID // uuid.Nil: any
}

// DecidedError is returned for a decision on an approval that is no longer
// pending: it says who decided first.
type DecidedError struct{ Approval *Approval }

func (e *DecidedError) Error() string {
	a := e.Approval
	switch a.Status {
	case Cancelled:
		return fmt.Sprintf("approval %s was cancelled at %s: its session ended", a.ID, a.DecidedAt.Format(time.RFC3339))
	default:
		return fmt.Sprintf("approval %s was already %s by %s at %s", a.ID, a.Status, a.Reviewer, a.DecidedAt.Format(time.RFC3339))
	}
}
