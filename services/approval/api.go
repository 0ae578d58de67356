package approval

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/micro"
)

// Subjects of the approval service's API, for the CLI. Each takes and
// returns JSON.
const (
	SubjectList   = "corral.approval.list"
	SubjectDecide = "corral.approval.decide"
)

// ListRequest asks for approvals: pending ones, or with All every one kept.
type ListRequest struct {
	Tenant string `json:"tenant,omitempty"`
	All    bool   `json:"all,omitempty"`
}

// DecideRequest decides an approval. Token is a reviewer's sign-in token:
// the decision is theirs. Session is needed only when the ID alone is
// ambiguous.
type DecideRequest struct {
	ID      uuid.UUID `json:"id"`
	Session uuid.UUID `json:"session,omitzero"`
	Approve bool      `json:"approve"`
	Token   string    `json:"token"`
	Reason  string    `json:"reason,omitempty"`
}

// Response is the answer to either request.
type Response struct {
	Approvals []*Approval `json:"approvals"`
}

// Error codes of the API.
const (
	CodeBadRequest   = "400"
	CodeUnauthorized = "401"
	CodeNotFound     = "404"
	CodeDecided      = "409"
)

// reviewer returns the name of the reviewer whose token this is, or "".
func (s *Service) reviewer(token string) string {
	var name string
	for t, n := range s.cfg.Reviewers {
		if subtle.ConstantTimeCompare([]byte(t), []byte(token)) == 1 {
			name = n
		}
	}
	return name
}

func (s *Service) serveAPI(ctx context.Context) error {
	svc, err := micro.AddService(s.js.Conn(), micro.Config{
		Name:        "corral-approval",
		Version:     "1.0.0",
		Description: "approvals, for the corral CLI",
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
		<-s.synced
		statuses := []string{Pending}
		if req.All {
			statuses = nil
		}
		_ = r.RespondJSON(Response{Approvals: s.list(req.Tenant, statuses...)})
	}
	decide := func(r micro.Request) {
		var req DecideRequest
		if err := json.Unmarshal(r.Data(), &req); err != nil {
			_ = r.Error(CodeBadRequest, "malformed request: "+err.Error(), nil)
			return
		}
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		reviewer := s.reviewer(req.Token)
		if reviewer == "" {
			_ = r.Error(CodeUnauthorized, ErrNoReviewer.Error(), nil)
			return
		}
		a, err := s.Decide(rctx, Ref{ID: req.ID, Session: req.Session}, req.Approve, reviewer, req.Reason)
		var decided *DecidedError
		switch {
		case errors.Is(err, ErrAmbiguous):
			_ = r.Error(CodeBadRequest, err.Error(), nil)
		case errors.As(err, &decided):
			_ = r.Error(CodeDecided, err.Error(), nil)
		case errors.Is(err, ErrNotFound):
			_ = r.Error(CodeNotFound, fmt.Sprintf("no approval %s", req.ID), nil)
		case err != nil && a == nil:
			_ = r.Error(CodeBadRequest, err.Error(), nil)
		case err != nil:
			s.log.WarnContext(rctx, "decide", "id", req.ID, "err", err)
			_ = r.Error("500", err.Error(), nil)
		default:
			_ = r.RespondJSON(Response{Approvals: []*Approval{a}})
		}
	}
	if err := svc.AddEndpoint("list", micro.HandlerFunc(list), micro.WithEndpointSubject(SubjectList)); err != nil {
		return fmt.Errorf("approval api: %w", err)
	}
	if err := svc.AddEndpoint("decide", micro.HandlerFunc(decide), micro.WithEndpointSubject(SubjectDecide)); err != nil {
		return fmt.Errorf("approval api: %w", err)
	}
	<-ctx.Done()
	return svc.Stop()
}
