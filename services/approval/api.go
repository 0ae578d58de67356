package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/micro"

	"corral.dev/pkg/approvalapi"
	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
)

// Subject, ListRequest, DecideRequest, Response and the error codes are
// the API's contract, kept in package approvalapi.
var Subject = approvalapi.Subject

type (
	ListRequest   = approvalapi.ListRequest
	DecideRequest = approvalapi.DecideRequest
	Response      = approvalapi.Response
)

// Error codes of the API.
const (
	CodeBadRequest = approvalapi.CodeBadRequest
	CodeNotFound   = approvalapi.CodeNotFound
	CodeDecided    = approvalapi.CodeDecided
)

// callerOf returns the tenant and user a request's subject names (see
// [Subject]).
func callerOf(subject string) (tenant, user string, err error) {
	tok := strings.Split(subject, ".")
	if len(tok) != 5 {
		return "", "", fmt.Errorf("%s is not a subject of the approval API", subject)
	}
	if err := event.CheckTenant(tok[2]); err != nil {
		return "", "", fmt.Errorf("subject %s: %w", subject, err)
	}
	user, err = bus.ParseUserToken(tok[3])
	if err != nil {
		return "", "", fmt.Errorf("subject %s: %w", subject, err)
	}
	return tok[2], user, nil
}

func (s *Service) serveAPI(ctx context.Context) error {
	svc, err := micro.AddService(s.js.Conn(), micro.Config{
		Name:        "corral-approval",
		Version:     "1.0.0",
		Description: "approvals, for the corral CLI and the Slack bridge",
	})
	if err != nil {
		return fmt.Errorf("approval api: %w", err)
	}
	list := func(r micro.Request) {
		var req ListRequest
		if err := json.Unmarshal(r.Data(), &req); err != nil {
			_ = r.Error(CodeBadRequest, "malformed request: "+err.Error(), nil)
			return
		}
		tenant, _, err := callerOf(r.Subject())
		if err != nil {
			_ = r.Error(CodeBadRequest, err.Error(), nil)
			return
		}
		if req.Tenant != "" && req.Tenant != tenant {
			_ = r.Error(CodeBadRequest, fmt.Sprintf("the request names tenant %q, but its subject is tenant %q's: a client lists only its own tenant's approvals", req.Tenant, tenant), nil)
			return
		}
		<-s.synced
		statuses := []string{Pending}
		if req.All {
			statuses = nil
		}
		_ = r.RespondJSON(Response{Approvals: s.list(tenant, statuses...)})
	}
	decide := func(r micro.Request) {
		var req DecideRequest
		if err := json.Unmarshal(r.Data(), &req); err != nil {
			_ = r.Error(CodeBadRequest, "malformed request: "+err.Error(), nil)
			return
		}
		// Only reviewers' credentials, and the Slack bridge, may publish
		// here: the subject's user is the reviewer.
		tenant, reviewer, err := callerOf(r.Subject())
		if err != nil {
			_ = r.Error(CodeBadRequest, err.Error(), nil)
			return
		}
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		a, err := s.Decide(rctx, Ref{ID: req.ID, Tenant: tenant, Session: req.Session}, req.Approve, reviewer, req.Reason)
		var decided *DecidedError
		switch {
		case errors.Is(err, ErrAmbiguous):
			_ = r.Error(CodeBadRequest, err.Error(), nil)
		case errors.As(err, &decided):
			_ = r.Error(CodeDecided, err.Error(), nil)
		case errors.Is(err, ErrNotFound):
			_ = r.Error(CodeNotFound, fmt.Sprintf("no approval %s in tenant %s", req.ID, tenant), nil)
		case err != nil && a == nil:
			_ = r.Error(CodeBadRequest, err.Error(), nil)
		case err != nil:
			s.log.WarnContext(rctx, "decide", "id", req.ID, "tenant", tenant, "err", err)
			_ = r.Error("500", err.Error(), nil)
		default:
			_ = r.RespondJSON(Response{Approvals: []*Approval{a}})
		}
	}
	for op, h := range map[string]micro.HandlerFunc{bus.OpList: list, bus.OpDecide: decide} {
		// Only the server's record says a request came from a client: one
		// published in this service's own account could be a compromised
		// service's, or the server's answer to one on a subject it chose,
		// which no permission stops.
		admitted := func(r micro.Request) {
			if err := bus.Admit(r, s.cfg.Clients); err != nil {
				s.log.WarnContext(ctx, "approval api: refused", "subject", r.Subject(), "err", err)
				return
			}
			h(r)
		}
		if err := svc.AddEndpoint(op, micro.HandlerFunc(admitted), micro.WithEndpointSubject(bus.ApprovalAPI("*", "*", op))); err != nil {
			return fmt.Errorf("approval api: %w", err)
		}
	}
	<-ctx.Done()
	return svc.Stop()
}
