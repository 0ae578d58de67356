package approval

import (
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/approvalapi"
)

// The approval API's contract (its types, statuses and subjects) is in
// package approvalapi, which clients import without the service.
type (
	Approval = approvalapi.Approval
	Step     = approvalapi.Step
)

// Statuses of an [Approval].
const (
	Pending   = approvalapi.Pending
	Approved  = approvalapi.Approved
	Denied    = approvalapi.Denied
	Cancelled = approvalapi.Cancelled
)

func key(tenant string, session, call uuid.UUID) string {
	return fmt.Sprintf("%s.%s.%s", tenant, session, call)
}

// ErrNotFound is returned for an approval ID nobody asked for.
var ErrNotFound = errors.New("no such approval")

// ErrAmbiguous is returned for an approval ID found in more than one
// session (only a raise's ID, which its asker picks, can be), or in more
// than one tenant (session IDs are picked by clients too): the session, or
// the tenant, must be named too.
var ErrAmbiguous = errors.New("the approval ID is ambiguous")

// Ref names an approval: its ID, and its session and tenant when the ID
// alone is ambiguous.
type Ref struct {
	ID uuid.UUID
	// Tenant is the approval's tenant: the API's subject's, or the page's
	// form's. "" (any) only for a form from a page loaded before the page
	// named tenants; an ID found in more than one tenant is then refused.
	Tenant  string
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
