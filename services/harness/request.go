package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/egressapi"
	"corral.dev/pkg/environmentapi"
	"corral.dev/pkg/event"
	"corral.dev/pkg/model"
	"corral.dev/pkg/policy"
	"corral.dev/schemas"
)

// MaxPromptBytes is the largest prompt a request may carry.
const MaxPromptBytes = 256 << 10

// handleRequest validates a client's request and records it in the
// session's log, which triggers the session's next step. A request that does
// not validate is given up, and its session records why.
//
// Tenant, session and user come from the subject, which the NATS
// permissions let a credential publish only under its own tenant (and a
// user's credential only under its own user); a body that says otherwise is
// refused. A session is its first request's user's: a follow-up from
// anyone else is refused.
func (s *Service) handleRequest(ctx context.Context, m bus.Msg) error {
	if m.Spoofed != "" {
		// The server's answer to someone's read, published on a request
		// subject the reader chose: no client sent it.
		return bus.Rejected(fmt.Errorf("a request carrying the server's %s header: an echo of a stream's answer, or a forgery", m.Spoofed))
	}
	if tenant, session, ok := consoleSubject(m.Subject); ok {
		return s.handleConsoleStop(ctx, tenant, session, m.Data)
	}
	tenant, session, user, err := requestSubject(m.Subject)
	if err != nil {
		return bus.Permanent(err)
	}
	if typ := controlType(m.Data); typ != "" {
		return s.handleControl(ctx, tenant, session, user, typ, m.Data)
	}
	if err := schemas.Validate(event.TypeRequest, m.Data); err != nil {
		return bus.Permanent(fmt.Errorf("invalid request: %v", err))
	}
	var req event.Request
	if err := json.Unmarshal(m.Data, &req); err != nil {
		return bus.Permanent(fmt.Errorf("invalid request: %v", err))
	}
	if req.User == "" {
		req.User = user
	}
	if err := checkRequest(&req, tenant, session.String()); err != nil {
		return bus.Permanent(err)
	}
	if req.User != user {
		return bus.Permanent(fmt.Errorf("invalid request: user %q does not match the subject's %q", req.User, user))
	}
	modelName := req.Model
	if modelName == "" {
		modelName = s.cfg.DefaultModel
	}
	if _, _, err := s.providers.Resolve(modelName); err != nil {
		// Not a poison message: the request was well formed, so the
		// failure is the session's and the message is done.
		return s.recordFailure(ctx, tenant, session, modelCode(err), err.Error(), req.ID.String())
	}

	// Under the session's lease no step is asking the model, so a
	// follow-up lands between turns: after the last response, or queued
	// behind the results of calls still out.
	return s.withSession(ctx, s.sessions.Lock, tenant, session, func(ctx context.Context, st *state) error {
		if st.Requests[req.ID] {
			return nil // recorded already: a redelivery or a duplicate
		}
		if st.User != "" && st.User != user {
			// Not the session's to continue; the session goes on as it was.
			return bus.Permanent(fmt.Errorf("session %s is not user %q's", session, user))
		}
		// A refusal is recorded as the session's failure, not folded into
		// st: the next step reads the log again.
		refuse := func(why string) error {
			st.stale = true
			return s.recordFailure(ctx, tenant, session, event.CodeInvalidRequest, why, req.ID.String())
		}
		if req.Fork != uuid.Nil {
			if why, err := s.checkFork(ctx, tenant, session, &req, len(st.Requests) > 0); err != nil || why != "" {
				if err != nil {
					return err
				}
				return refuse(why)
			}
		}
		ev := event.SessionRequested{
			Header:  event.NewHeader(event.TypeSessionRequested, tenant, session),
			Request: req.ID,
			User:    req.User,
			Model:   modelName,
			Prompt:  req.Prompt,
			Fork:    req.Fork,
		}
		if len(st.Requests) == 0 {
			why, err := s.startFrom(ctx, &req, &ev)
			if err != nil {
				return err
			}
			if why != "" {
				return refuse(why)
			}
		} else if req.Repo != nil || req.Files != "" || req.Environment != "" || req.Vaults != nil {
			why := fmt.Sprintf("session %s has started already: what a workspace starts from (repo, files, environment, vaults) is named only by a session's first request", session)
			return refuse(why)
		} else if !req.SessionConfig.IsZero() {
			why := fmt.Sprintf("session %s has started already: what a session runs with (system, tools, ask, budget) is set only by its first request", session)
			return refuse(why)
		}
		return s.append(ctx, st, &ev, "request:"+req.ID.String())
	})
}

// startFrom records in ev, a session's first request, what its workspace
// starts from and the environment it runs in (a request naming none gets
// its tenant's default), with the call that prepares the workspace when
// there is anything to prepare: files to lay out, a repository to clone,
// an environment not built yet. It says why the request cannot start a
// session, or "" if it can.
func (s *Service) startFrom(ctx context.Context, req *event.Request, ev *event.SessionRequested) (string, error) {
	if req.Fork != uuid.Nil && (req.Repo != nil || req.Files != "") {
		return "a session starts from one of fork, repo and files, not more", nil
	}
	if req.Repo != nil && req.Files != "" {
		return "a session starts from one of repo and files, not both", nil
	}
	if req.Repo != nil {
		if err := req.Repo.Check(); err != nil {
			return err.Error(), nil
		}
	}
	name, version, built, why, err := s.resolveEnvironment(ctx, req.Tenant, req.Environment)
	if err != nil || why != "" {
		return why, err
	}
	if why, err := s.checkVaults(ctx, req.Tenant, req.Vaults); err != nil || why != "" {
		return why, err
	}
	ev.Vaults = req.Vaults
	ev.Repo, ev.Files = req.Repo, req.Files
	ev.SessionConfig = req.SessionConfig
	ev.Environment, ev.EnvironmentVersion = name, version
	if req.Repo != nil || req.Files != "" || name != "" && !built {
		// The same ID for every delivery of the request.
		ev.Prepare = uuid.NewSHA1(req.Session, []byte("prepare:"+req.Tenant+":"+req.ID.String()))
	}
	return "", nil
}

// checkFork says why a request may not fork the session it names, or ""
// if it may: the fork must start a session, and name another session of
// the same tenant.
func (s *Service) checkFork(ctx context.Context, tenant string, session uuid.UUID, req *event.Request, started bool) (string, error) {
	switch {
	case started:
		return fmt.Sprintf("fork: session %s has started already; only a new session can be a fork", session), nil
	case req.Fork == session:
		return "fork: a session cannot be a fork of itself", nil
	}
	_, found, err := s.logs.First(ctx, tenant, req.Fork, event.TypeSessionRequested)
	switch {
	case err != nil:
		return "", fmt.Errorf("look up session %s: %w", req.Fork, err)
	case !found:
		return fmt.Sprintf("fork: no session %s in tenant %s", req.Fork, tenant), nil
	}
	return "", nil
}

// consoleSubject returns the tenant and session of a stop the sessions
// console sent, on requests.<tenant>.<session>.console, and whether
// subject is one.
func consoleSubject(subject string) (tenant string, session uuid.UUID, ok bool) {
	tok := strings.Split(subject, ".")
	if len(tok) != 4 || tok[0] != "requests" || tok[3] != bus.ConsoleToken {
		return "", uuid.Nil, false
	}
	tenant, session, err := bus.ParseSubject(subject)
	return tenant, session, err == nil
}

// requestSubject returns the tenant, session and user a request's subject,
// requests.<tenant>.<session>.<user token>, names.
func requestSubject(subject string) (tenant string, session uuid.UUID, user string, err error) {
	tok := strings.Split(subject, ".")
	if len(tok) != 4 || tok[0] != "requests" {
		return "", uuid.Nil, "", fmt.Errorf("%w: %s: want requests.<tenant>.<session>.<user token>", bus.ErrBadSubject, subject)
	}
	if tenant, session, err = bus.ParseSubject(subject); err != nil {
		return "", uuid.Nil, "", err
	}
	if user, err = bus.ParseUserToken(tok[3]); err != nil {
		return "", uuid.Nil, "", fmt.Errorf("%w: %s: %w", bus.ErrBadSubject, subject, err)
	}
	return tenant, session, user, nil
}

func checkRequest(req *event.Request, tenant, session string) error {
	var problems []string
	if req.Type != event.TypeRequest {
		problems = append(problems, fmt.Sprintf("type is %q, want %q", req.Type, event.TypeRequest))
	}
	if req.ID == uuid.Nil {
		problems = append(problems, "id is missing")
	}
	if err := event.CheckTenant(tenant); err != nil {
		problems = append(problems, err.Error())
	}
	if req.Tenant != tenant {
		problems = append(problems, fmt.Sprintf("tenant %q does not match the subject's %q", req.Tenant, tenant))
	}
	if req.Session.String() != session {
		problems = append(problems, fmt.Sprintf("session %s does not match the subject's %s", req.Session, session))
	}
	if strings.TrimSpace(req.User) == "" || len(req.User) > 256 {
		problems = append(problems, "user must be 1-256 characters")
	}
	switch {
	case strings.TrimSpace(req.Prompt) == "":
		problems = append(problems, "prompt is empty")
	case len(req.Prompt) > MaxPromptBytes:
		problems = append(problems, fmt.Sprintf("prompt is %d bytes; the limit is %d", len(req.Prompt), MaxPromptBytes))
	case !utf8.ValidString(req.Prompt):
		problems = append(problems, "prompt is not valid UTF-8")
	}
	if err := req.SessionConfig.Check(); err != nil {
		problems = append(problems, err.Error())
	}
	if err := normalBudget(&req.SessionConfig); err != nil {
		problems = append(problems, err.Error())
	}
	if len(problems) > 0 {
		return fmt.Errorf("invalid request: %s", strings.Join(problems, "; "))
	}
	return nil
}

// normalBudget checks a request's budget and writes it as the policy
// does, so that the log holds what the session's caps read as. A cap
// above its tenant's is no error: the tenant's counts (see
// [core.SessionLimits]).
func normalBudget(c *event.SessionConfig) error {
	if len(c.Budget) == 0 {
		return nil
	}
	var l policy.Limits
	if err := json.Unmarshal(c.Budget, &l); err != nil {
		return fmt.Errorf("budget: %v", err)
	}
	if l == (policy.Limits{}) {
		c.Budget = nil // no caps of its own
		return nil
	}
	b, err := json.Marshal(l)
	if err != nil {
		return fmt.Errorf("budget: %v", err)
	}
	c.Budget = b
	return nil
}

// controlType returns the type of a request that controls a session (a
// stop, a budget raise), or "" for a request to start or continue one.
func controlType(data []byte) string {
	var probe struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(data, &probe)
	switch probe.Type {
	case event.TypeSessionStopped, event.TypeBudgetRaise:
		return probe.Type
	}
	return ""
}

// admitRequest admits a request to start or continue a session after the
// session's steps and requests before it, within its tenant's share. A
// stop or a budget raise waits for neither: it is recorded at once, and
// must reach a step that is asking the model.
func admitRequest(m bus.Msg) (key, group string) {
	if controlType(m.Data) != "" {
		return "", ""
	}
	return bus.BySession(m)
}

// checkVaults says why a session of tenant may not be restricted to
// vaults, or "" if it may: each must be a vault of the tenant (the HTTP
// API's, which every user of the tenant may name), not archived.
func (s *Service) checkVaults(ctx context.Context, tenant string, vaults []string) (string, error) {
	for _, id := range vaults {
		rctx, cancel := bus.Bound(ctx)
		g, err := egressapi.LookupGroup(rctx, s.js, tenant, id)
		cancel()
		switch {
		case errors.Is(err, egressapi.ErrNoGroup):
			return "vaults: " + err.Error() + " (GET /v1/vaults lists the tenant's)", nil
		case err != nil:
			return "", err
		case g.ArchivedAt != nil:
			return fmt.Sprintf("vaults: vault %s is archived: its credentials are gone", id), nil
		}
	}
	return "", nil
}

// resolveEnvironment returns the environment a session of tenant runs in,
// given the name its request gives ("" for the tenant's default), the
// version of its definition, and whether that version is built. It says
// why a request names one the tenant does not have.
func (s *Service) resolveEnvironment(ctx context.Context, tenant, name string) (resolved, version string, built bool, why string, err error) {
	rctx, cancel := bus.Bound(ctx)
	defer cancel()
	resolved, version, built, err = environmentapi.Resolve(rctx, s.environments, tenant, name)
	if errors.Is(err, environmentapi.ErrUnknown) {
		return "", "", false, "environment: " + err.Error() + " (corral environments ls lists the tenant's)", nil
	}
	return resolved, version, built, "", err
}

// modelCode is the failure code of a session whose model did not resolve:
// a provider the harness has no key for, or a name it cannot map.
func modelCode(err error) string {
	if errors.Is(err, model.ErrNotConfigured) {
		return event.CodeNotConfigured
	}
	return event.CodeUnknownModel
}
