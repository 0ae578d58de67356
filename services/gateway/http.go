package gateway

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
	"corral.dev/pkg/event"
	"corral.dev/services/gateway/internal/wire"
)

// apiError is an error answered with the API's error shape.
type apiError struct {
	status int
	typ    string
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &apiError{http.StatusBadRequest, wire.InvalidRequest, fmt.Sprintf(format, args...)}
}

func notFound(format string, args ...any) error {
	return &apiError{http.StatusNotFound, wire.NotFound, fmt.Sprintf(format, args...)}
}

// unsupported answers what Corral has no counterpart for: never a silent
// success.
func unsupported(format string, args ...any) error {
	return &apiError{http.StatusBadRequest, wire.InvalidRequest, fmt.Sprintf(format, args...) + " is not supported by Corral"}
}

// caller is who a request is from: the connection of its API key, the
// tenant it acts in and the user its sessions' requests are from.
type caller struct {
	*client
	tenant string
	user   string
}

// handler is an API endpoint: it writes its answer, or returns the error
// to answer with.
type handler func(ctx context.Context, c *caller, w http.ResponseWriter, r *http.Request) error

// Headers the gateway reads besides the SDKs' own.
const (
	// headerWorkspace names the tenant an operator's key acts in (the
	// SDKs send it as WorkspaceID); any other key's tenant is its own.
	headerWorkspace = "anthropic-workspace-id"
	// headerUser names the user a bot's or an operator's key speaks for
	// (default: the credential's ID); a user's key is its user.
	headerUser = "x-corral-user"
)

// routes returns the API's routes.
func (s *Service) routes() http.Handler {
	mux := http.NewServeMux()
	handle := func(pattern string, h handler) { mux.Handle(pattern, s.authenticated(h)) }
	handle("POST /v1/sessions", s.capped(s.createSession))
	handle("GET /v1/sessions", s.listSessions)
	handle("GET /v1/sessions/{id}", s.getSession)
	handle("GET /v1/sessions/{id}/events", s.listEvents)
	handle("GET /v1/sessions/{id}/events/stream", s.streamEvents)
	handle("POST /v1/sessions/{id}/events", s.sendEvents)
	handle("POST /v1/agents", s.capped(s.createAgent))
	handle("GET /v1/agents", s.listAgents)
	handle("GET /v1/agents/{id}", s.getAgent)
	handle("POST /v1/agents/{id}", s.updateAgent)
	handle("POST /v1/agents/{id}/archive", s.archiveAgent)
	handle("POST /v1/environments", s.createEnvironment)
	handle("GET /v1/environments", s.listEnvironments)
	handle("GET /v1/environments/{id}", s.getEnvironment)
	handle("POST /v1/environments/{id}", s.updateEnvironment)
	handle("DELETE /v1/environments/{id}", s.deleteEnvironment)
	handle("POST /v1/vaults", s.createVault)
	handle("GET /v1/vaults", s.listVaults)
	handle("GET /v1/vaults/{id}", s.getVault)
	handle("POST /v1/vaults/{id}", s.updateVault)
	handle("DELETE /v1/vaults/{id}", s.deleteVault)
	handle("POST /v1/vaults/{id}/archive", s.archiveVault)
	handle("POST /v1/vaults/{id}/credentials", s.createCredential)
	handle("GET /v1/vaults/{id}/credentials", s.listCredentials)
	handle("GET /v1/vaults/{id}/credentials/{cid}", s.getCredential)
	handle("POST /v1/vaults/{id}/credentials/{cid}", s.updateCredential)
	handle("DELETE /v1/vaults/{id}/credentials/{cid}", s.deleteCredential)
	handle("POST /v1/vaults/{id}/credentials/{cid}/archive", s.archiveCredential)
	handle("POST /v1/files", s.capped(s.uploadFile))
	handle("GET /v1/files", s.listFiles)
	handle("GET /v1/files/{id}", s.getFile)
	handle("GET /v1/files/{id}/content", s.downloadFile)
	handle("DELETE /v1/files/{id}", s.deleteFile)
	for _, p := range []string{
		"POST /v1/sessions/{id}", "DELETE /v1/sessions/{id}", "POST /v1/sessions/{id}/archive",
		"/v1/sessions/{id}/resources", "/v1/sessions/{id}/resources/{rest...}", "/v1/sessions/{id}/threads/{rest...}",
		"/v1/agents/{id}/versions", "/v1/agents/{id}/versions/{rest...}", "POST /v1/environments/{id}/archive",
		"/v1/vaults/{id}/credentials/{cid}/mcp_oauth_validate",
	} {
		handle(p, s.notSupported)
	}
	mux.Handle("/", s.authenticated(func(_ context.Context, _ *caller, _ http.ResponseWriter, r *http.Request) error {
		return notFound("%s %s is no endpoint of Corral's API", r.Method, r.URL.Path)
	}))
	return mux
}

// notSupported answers an endpoint of the API that Corral does not serve.
func (s *Service) notSupported(_ context.Context, _ *caller, _ http.ResponseWriter, r *http.Request) error {
	switch {
	case strings.HasPrefix(r.URL.Path, "/v1/vaults"):
		return unsupported("%s %s (Corral's agents use no MCP servers: a credential is a secret egress adds to the requests to the hosts it binds)", r.Method, r.URL.Path)
	case strings.HasPrefix(r.URL.Path, "/v1/sessions/") && (strings.HasSuffix(r.URL.Path, "/archive") || r.Method == http.MethodDelete):
		return unsupported("%s %s (a session's log, and what it ran with, are kept for good)", r.Method, r.URL.Path)
	}
	return unsupported("%s %s", r.Method, r.URL.Path)
}

// authenticated answers h's request signed in as the request's API key
// (x-api-key, or Authorization: Bearer), in the tenant the key may act in.
func (s *Service) authenticated(h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rid := "req_" + strings.ReplaceAll(uuid.Must(uuid.NewV7()).String(), "-", "")
		w.Header().Set("request-id", rid)
		err := s.answer(h, w, r)
		if err == nil {
			return
		}
		var ae *apiError
		switch {
		case errors.As(err, &ae):
		case errors.Is(err, bus.ErrRefused):
			ae = &apiError{http.StatusForbidden, wire.Permission, "this API key's credential may not do that: " + err.Error()}
		case errors.Is(err, errNoRecord):
			ae = &apiError{http.StatusNotFound, wire.NotFound, err.Error()}
		case errors.Is(err, errKeyFormat), errors.Is(err, errKeyRefused):
			ae = &apiError{http.StatusUnauthorized, wire.Authentication, err.Error()}
		case errors.Is(err, errSignInRate):
			ae = &apiError{http.StatusTooManyRequests, wire.RateLimit, err.Error()}
		case errors.Is(err, errTooManyKeys):
			ae = &apiError{529, wire.Overloaded, err.Error()}
		case r.Context().Err() != nil:
			return // the client went away
		default:
			ae = s.internal(r, rid, err)
		}
		writeJSON(w, ae.status, wire.ErrorBody{Type: "error", Error: wire.ErrorDetail{Type: ae.typ, Message: ae.msg}, RequestID: rid})
	})
}

// answer signs in as r's key and calls h.
func (s *Service) answer(h handler, w http.ResponseWriter, r *http.Request) error {
	key := r.Header.Get("x-api-key")
	if key == "" {
		if b, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			key = b
		}
	}
	if key == "" {
		return &apiError{http.StatusUnauthorized, wire.Authentication, "no API key: send a Corral credential as x-api-key: ID:SECRET (corral credentials issue)"}
	}
	if u := r.Header.Get(headerUser); u != "" && (strings.TrimSpace(u) != u || len(u) > maxUser) {
		// A user names a token of each subject its sessions' requests
		// go on: one past the server's bound would cut the key's
		// connection, and every stream on it.
		return badRequest("%s: a user is 1 to %d bytes, without spaces around it", headerUser, maxUser)
	}
	ctx := r.Context()
	c, release, err := s.clients.acquire(ctx, key, clientAddr(r))
	if err != nil {
		return err
	}
	defer release()
	cl := &caller{client: c, tenant: c.cred.Tenant, user: c.cred.User}
	ws := r.Header.Get(headerWorkspace)
	switch {
	case c.cred.Role == credential.RoleOperator && ws == "":
		return badRequest("an operator's key acts in any tenant: name one with the %s header", headerWorkspace)
	case c.cred.Role == credential.RoleOperator:
		if err := event.CheckTenant(ws); err != nil {
			return badRequest("%s: %v", headerWorkspace, err)
		}
		cl.tenant = ws
	case ws != "" && ws != c.cred.Tenant:
		return &apiError{http.StatusForbidden, wire.Permission, fmt.Sprintf("this API key is of tenant %s, not %s", c.cred.Tenant, ws)}
	}
	switch u := r.Header.Get(headerUser); {
	case c.cred.Role == credential.RoleUser && u != "" && u != c.cred.User:
		return &apiError{http.StatusForbidden, wire.Permission, fmt.Sprintf("this API key acts as user %s alone", c.cred.User)}
	case c.cred.Role == credential.RoleUser:
	case u != "":
		cl.user = u
	default:
		// A reviewer's own user; a bot's or an operator's credential
		// names none.
		cl.user = cmp.Or(c.cred.User, c.cred.ID)
	}
	return h(ctx, cl, w, r)
}

// maxUser bounds the user a request names, as it bounds a credential's.
const maxUser = 256

// writeJSON writes v as the answer, with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// maxBody bounds a request's body.
const maxBody = 4 << 20

// decode reads r's JSON body into v, refusing fields v does not know:
// what Corral does not read is never silently dropped.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	return decodeStrict(http.MaxBytesReader(w, r.Body, maxBody), v, "the request's body: ")
}

// strict reads raw, a part of a body kept raw to be read by its type, into
// v as [decode] reads a body: a field v does not know is refused, not
// dropped.
func strict(raw json.RawMessage, v any) error {
	return decodeStrict(bytes.NewReader(raw), v, "")
}

// decodeStrict reads r's JSON into v, refusing fields v does not know; a
// body that is no JSON of v's shape is a bad request, its error after
// prefix.
func decodeStrict(r io.Reader, v any, prefix string) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return unsupported("the field %s", f)
		}
		return badRequest("%s%v", prefix, err)
	}
	return nil
}
