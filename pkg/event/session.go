package event

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/google/uuid"

	"corral.dev/pkg/model"
)

// Request asks Corral to start a session or to continue one with a follow-up
// message. Clients publish it on requests.<tenant>.<session>.<user token>;
// the harness records a session's request once by its ID, so a retried
// publish starts nothing twice. A Nats-Msg-Id, if set, must be one no one
// else can work out (a random ID, as [NewHeader]'s): the requests' stream
// drops a message whose ID it holds whoever sent it, on any subject.
// Schema: schemas/session/v1/request.json.
type Request struct {
	// Header.ID is the client-chosen ID of this request.
	Header
	User string `json:"user"`
	// Model is "openai:<model>" or "anthropic:<model>"; empty means the
	// harness's default.
	Model  string `json:"model,omitempty"`
	Prompt string `json:"prompt"`
	// SessionConfig, on a session's first request, is what the session
	// runs with beyond its tenant's policy: its own instructions, tools
	// and budget.
	SessionConfig
	// Fork, on a session's first request, names a session of the same
	// tenant whose workspace, as of its last snapshot, the new session
	// starts from. The conversation starts afresh.
	Fork uuid.UUID `json:"fork,omitzero"`
	// Repo, on a session's first request, is a git repository the
	// workspace starts as a checkout of, cloned through egress (with the
	// tenant's vault credentials for its host) before the model's first
	// turn.
	Repo *Repo `json:"repo,omitempty"`
	// Files, on a session's first request, names a file list the client
	// uploaded (see package upload): the workspace starts as those files.
	// It is "sha256:<hex>" of the list.
	Files string `json:"files,omitempty"`
	// Environment, on a session's first request, names the tenant's
	// environment the session runs in; empty means the tenant's default,
	// if it has one.
	Environment string `json:"environment,omitempty"`
	// Vaults, on a session's first request, names the tenant's vaults
	// (the HTTP API's, by ID) whose credentials alone egress may add to
	// the session's requests; none means every vault of the tenant and
	// the user that binds a request's host.
	Vaults []string `json:"vaults,omitempty"`
}

// Repo is a git repository a workspace starts from.
type Repo struct {
	// URL is an http or https URL of the repository, with no credentials
	// in it: egress adds the tenant's.
	URL string `json:"url"`
	// Ref is a branch, a tag or a full commit ID; empty is the
	// repository's default branch.
	Ref string `json:"ref,omitempty"`
	// Depth is how many commits of history are fetched: 0 means 1 (a
	// shallow clone), -1 the whole history.
	Depth int `json:"depth,omitempty"`
}

// Check says why r cannot be cloned: a URL that is not http or https,
// carries credentials, a query or a fragment, or a ref that is no name
// of a branch, tag or commit (one starting with "-" would be an option to
// git). The harness checks a request's, and the sandbox-manager again
// before it clones.
func (r *Repo) Check() error {
	u, err := url.Parse(r.URL)
	switch {
	case err != nil:
		return fmt.Errorf("repo: url %q does not parse: %v", r.URL, err)
	case u.Scheme != "https" && u.Scheme != "http":
		return fmt.Errorf("repo: url %q: only http and https repositories are cloned (egress injects the tenant's credentials into those)", r.URL)
	case u.User != nil:
		return errors.New("repo: the url carries credentials: put the token in a vault (corral vaults create), and egress adds it to the requests to the forge; the sandbox never sees it")
	case u.Hostname() == "" || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "":
		return fmt.Errorf("repo: url %q: want scheme://host/path, with no query or fragment", r.URL)
	case r.Depth < -1:
		return fmt.Errorf("repo: depth %d: want a number of commits, or -1 for the whole history", r.Depth)
	case !refRE.MatchString(r.Ref) || strings.Contains(r.Ref, ".."):
		return fmt.Errorf("repo: ref %q is not a branch, tag or commit name", r.Ref)
	}
	return nil
}

// refRE is what a ref may look like: empty (the default branch), or a
// name git allows that starts with neither "-" nor "/".
var refRE = regexp.MustCompile(`^([A-Za-z0-9_][A-Za-z0-9_./+@-]{0,254})?$`)

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
	// SessionConfig is the first request's, as the harness accepted it:
	// what every step of the session runs with.
	SessionConfig
	// Fork is the session whose workspace this one starts from.
	Fork uuid.UUID `json:"fork,omitzero"`
	// Repo and Files are what the workspace starts from, as the request
	// named them.
	Repo  *Repo  `json:"repo,omitempty"`
	Files string `json:"files,omitempty"`
	// Environment is the environment the session runs in, resolved
	// (a request naming none gets the tenant's default), and
	// EnvironmentVersion the version of its definition the session
	// uses, for as long as it runs.
	Environment        string `json:"environment,omitempty"`
	EnvironmentVersion string `json:"environment_version,omitempty"`
	// Vaults are the vaults the first request named, each checked to be
	// the tenant's: for as long as the session runs, egress adds the
	// credentials of those alone to its requests.
	Vaults []string `json:"vaults,omitempty"`
	// Prepare is the ID of the call that prepares the session's
	// workspace before the model's first turn (lays out its files, clones
	// its repository, builds its environment); nil when there is nothing
	// to prepare.
	Prepare uuid.UUID `json:"prepare,omitzero"`
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
	// Changes is, for a session whose workspace started from a
	// repository or uploaded files, what it changed there (see
	// [ToolCompleted].Changes).
	Changes *Changes `json:"changes,omitempty"`
}

// Failure codes of [SessionFailed].
const (
	CodeInvalidRequest = "invalid_request"
	CodeUnknownModel   = "unknown_model"
	// CodeNotConfigured: the session's model is of a provider the
	// harness has no key for.
	CodeNotConfigured = "provider_not_configured"
	CodeModelError    = "model_error"
	CodePoison        = "poison_message"
	CodeBudget        = "budget_exceeded"
	// CodeWorkspace: the workspace could not be prepared (an unknown ref,
	// a forge that refused the credentials, files over the workspace's
	// quota, an environment whose setup failed).
	CodeWorkspace = "workspace_failed"
)

// SessionFailed records that a session cannot go on, and why.
// Schema: schemas/session/v1/failed.json.
type SessionFailed struct {
	Header
	Code   string `json:"code"`
	Reason string `json:"reason"`
	// Budget names the budget a session exceeded (code budget_exceeded),
	// as <scope>.<limit>: "tenant_daily.cost_usd". Only the tenant's
	// daily budget fails a session; the others pause it ([SessionPaused]).
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
