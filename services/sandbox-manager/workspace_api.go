package sandboxmanager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/micro"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/snapshot"
	"corral.dev/pkg/workspaceapi"
)

// The workspace API (package workspaceapi) lets clients read the files of
// their sessions' last snapshots, which they may not read from the store
// themselves. Every node answers it, in the micro service's queue group:
// a snapshot is the same from any node, and reading one starts no sandbox
// and touches no workspace on disk.

// serveWorkspaces answers the workspace API until ctx is done.
func (s *Service) serveWorkspaces(ctx context.Context) error {
	w, err := snapshot.NewReader(ctx, s.js, s.logs)
	if err != nil {
		return fmt.Errorf("workspace api: %w", err)
	}
	svc, err := micro.AddService(s.js.Conn(), micro.Config{
		Name:        "corral-workspace",
		Version:     "1.0.0",
		Description: "the files of sessions' last workspace snapshots, for the corral CLI",
	})
	if err != nil {
		return fmt.Errorf("workspace api: %w", err)
	}
	type handler func(ctx context.Context, tenant string, data []byte) (any, error)
	for op, h := range map[string]handler{
		workspaceapi.OpList: func(ctx context.Context, tenant string, data []byte) (any, error) {
			var req workspaceapi.ListRequest
			if err := decodeRequest(data, tenant, &req, &req.Tenant); err != nil {
				return nil, err
			}
			return w.List(ctx, tenant, &req)
		},
		workspaceapi.OpRead: func(ctx context.Context, tenant string, data []byte) (any, error) {
			var req workspaceapi.ReadRequest
			if err := decodeRequest(data, tenant, &req, &req.Tenant); err != nil {
				return nil, err
			}
			// A reply carries the data base64-encoded, in JSON, on this
			// connection too.
			limit := workspaceapi.ReadLength(s.js.Conn().MaxPayload())
			if req.Length <= 0 || req.Length > limit {
				req.Length = limit
			}
			return w.Read(ctx, tenant, &req)
		},
		workspaceapi.OpDiff: func(ctx context.Context, tenant string, data []byte) (any, error) {
			var req workspaceapi.DiffRequest
			if err := decodeRequest(data, tenant, &req, &req.Tenant); err != nil {
				return nil, err
			}
			// Half a read's length: the reply's changes, and JSON's
			// escapes of the patch's text, fit in the rest.
			return w.Diff(ctx, tenant, &req, int(workspaceapi.ReadLength(s.js.Conn().MaxPayload()))/2)
		},
	} {
		err := svc.AddEndpoint(op, micro.HandlerFunc(func(r micro.Request) {
			// Only the server's record says a request came from a
			// client: one published in this service's own account could
			// be a compromised service's, or the server's answer to one
			// on a subject it chose, which no permission stops.
			if err := bus.Admit(r, s.cfg.Clients); err != nil {
				s.log.WarnContext(ctx, "workspace api: refused", "subject", r.Subject(), "err", err)
				return
			}
			tenant, err := tenantOf(r.Subject())
			if err != nil {
				_ = r.Error(workspaceapi.CodeBadRequest, err.Error(), nil)
				return
			}
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			resp, err := h(rctx, tenant, r.Data())
			var ae *workspaceapi.Error
			switch {
			case errors.As(err, &ae):
				_ = r.Error(ae.Code, ae.Message, nil)
			case err != nil:
				s.log.WarnContext(rctx, "workspace api", "subject", r.Subject(), "err", err)
				_ = r.Error(workspaceapi.CodeInternal, err.Error(), nil)
			default:
				if err := r.RespondJSON(resp); err != nil {
					s.log.WarnContext(rctx, "workspace api: reply", "subject", r.Subject(), "err", err)
				}
			}
		}), micro.WithEndpointSubject(bus.WorkspaceAPI("*", "*", op)))
		if err != nil {
			return fmt.Errorf("workspace api: %w", err)
		}
	}
	<-ctx.Done()
	return svc.Stop()
}

// tenantOf returns the tenant a request's subject names (see
// [workspaceapi.Subject]), whose user token it checks too.
func tenantOf(subject string) (string, error) {
	tok := strings.Split(subject, ".")
	if len(tok) != 5 {
		return "", fmt.Errorf("%s is not a subject of the workspace API", subject)
	}
	if err := event.CheckTenant(tok[2]); err != nil {
		return "", fmt.Errorf("subject %s: %w", subject, err)
	}
	if _, err := bus.ParseUserToken(tok[3]); err != nil {
		return "", fmt.Errorf("subject %s: %w", subject, err)
	}
	return tok[2], nil
}

// decodeRequest decodes data into req, whose tenant field is named: a
// request naming another tenant than its subject's asks for what its
// sender may not have, and answering it as the subject's would hide that.
func decodeRequest(data []byte, tenant string, req any, named *string) error {
	if err := json.Unmarshal(data, req); err != nil {
		return workspaceapi.Errorf(workspaceapi.CodeBadRequest, "malformed request: %v", err)
	}
	if *named != "" && *named != tenant {
		return workspaceapi.Errorf(workspaceapi.CodeBadRequest, "the request names tenant %q, but its subject is tenant %q's: a client reads only its own tenant's workspaces", *named, tenant)
	}
	return nil
}
