package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/schemas"
)

// MaxPromptBytes is the largest prompt a request may carry.
const MaxPromptBytes = 256 << 10

// handleRequest validates a client's request and records it in the
// session's log, which triggers the session's next step. A request that does
// not validate is given up, and its session records why.
func (s *Service) handleRequest(ctx context.Context, m bus.Msg) error {
	tenant, session, err := bus.ParseSubject(m.Subject)
	if err != nil {
		return bus.Permanent(err)
	}
	if err := schemas.Validate(event.TypeRequest, m.Data); err != nil {
		return bus.Permanent(fmt.Errorf("invalid request: %v", err))
	}
	var req event.Request
	if err := json.Unmarshal(m.Data, &req); err != nil {
		return bus.Permanent(fmt.Errorf("invalid request: %v", err))
	}
	if err := checkRequest(&req, tenant, session.String()); err != nil {
		return bus.Permanent(err)
	}
	modelName := req.Model
	if modelName == "" {
		modelName = s.cfg.DefaultModel
	}
	if _, _, err := s.providers.Resolve(modelName); err != nil {
		// Not a poison message: the request was well formed, so the
		// failure is the session's and the message is done.
		return s.recordFailure(ctx, tenant, session, event.CodeUnknownModel, err.Error(), req.ID.String())
	}

	// Under the session's lease no step is asking the model, so a
	// follow-up lands between turns: after the last response, or queued
	// behind the results of calls still out.
	return s.withSession(ctx, s.sessions.Lock, tenant, session, func(ctx context.Context, st *state) error {
		if st.requests[req.ID] {
			return nil // recorded already: a redelivery or a duplicate
		}
		ev := event.SessionRequested{
			Header:  event.NewHeader(event.TypeSessionRequested, tenant, session),
			Request: req.ID,
			User:    req.User,
			Model:   modelName,
			Prompt:  req.Prompt,
		}
		return s.record(ctx, &ev, "request:"+req.ID.String())
	})
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
	if len(problems) > 0 {
		return fmt.Errorf("invalid request: %s", strings.Join(problems, "; "))
	}
	return nil
}
