package event

import (
	"errors"
	"fmt"
	"regexp"

	"github.com/google/uuid"

	"corral.dev/pkg/model"
)

// Request asks Corral to start a session or to continue one with a follow-up
// message. Clients publish it on requests.<tenant>.<session> with ID as the
// Nats-Msg-Id, so a retried publish starts nothing twice.
// Schema: schemas/session/v1/request.json.
type Request struct {
	// Header.ID is the client-chosen ID of this request.
	Header
	User string `json:"user"`
	// Model is "openai:<model>" or "anthropic:<model>"; empty means the
	// harness's default.
	Model  string `json:"model,omitempty"`
	Prompt string `json:"prompt"`
	// Fork, on a session's first request, names a session of the same
	// tenant whose workspace, as of its last snapshot, the new session
	// starts from. The conversation starts afresh.
	Fork uuid.UUID `json:"fork,omitzero"`
}

// SessionRequested records an accepted [Request] in the session's log.
// Schema: schemas/session/v1/requested.json.
type SessionRequested struct {
	Header
	// Request is the ID of the [Request] that started this.
	Request uuid.UUID `json:"request"`
	User    string    `json:"user"`
	// Model is the resolved model name, with its provider prefix.
	Model  string `json:"model"`
	Prompt string `json:"prompt"`
	// Fork is the session whose workspace this one starts from.
	Fork uuid.UUID `json:"fork,omitzero"`
}

// SessionCompleted records the session's final answer.
// Schema: schemas/session/v1/completed.json.
type SessionCompleted struct {
	Header
	Answer string `json:"answer"`
	// Turns is the number of model responses the session took.
	Turns int `json:"turns"`
	// Usage sums the tokens of every model response.
	Usage model.Usage `json:"usage"`
}

// Failure codes of [SessionFailed].
const (
	CodeInvalidRequest = "invalid_request"
	CodeUnknownModel   = "unknown_model"
	CodeModelError     = "model_error"
	CodePoison         = "poison_message"
	CodeBudget         = "budget_exceeded"
)

// SessionFailed records that a session cannot go on, and why.
// Schema: schemas/session/v1/failed.json.
type SessionFailed struct {
	Header
	Code   string `json:"code"`
	Reason string `json:"reason"`
	// Budget names the budget a session exceeded (code budget_exceeded),
	// as <scope>.<limit>: "session.steps", "user_daily.cost_usd".
	Budget string `json:"budget,omitempty"`
}

// SessionStopped records that someone stopped a session (corral stop): the
// harness asks the model nothing more, the sandbox-manager kills the
// running call and destroys the session's sandbox.
// Schema: schemas/session/v1/stopped.json.
type SessionStopped struct {
	Header
	By     string `json:"by"`
	Reason string `json:"reason,omitempty"`
}

var tenantRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// ErrInvalidTenant is returned by [CheckTenant].
var ErrInvalidTenant = errors.New("invalid tenant")

// CheckTenant reports whether s may name a tenant: 1 to 63 lowercase
// letters, digits, '-' and '_', starting with a letter or digit (it becomes
// a subject token and a directory name).
func CheckTenant(s string) error {
	if !tenantRE.MatchString(s) {
		return fmt.Errorf("%w %q: use 1-63 of a-z, 0-9, '-' and '_'", ErrInvalidTenant, s)
	}
	return nil
}
