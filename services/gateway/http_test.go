package gateway

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"corral.dev/services/gateway/internal/wire"
)

// TestErrorsHaveTheAPIShape checks what a request without a usable key
// gets: the API's error shape, with the status the SDKs read, before
// anything is asked of NATS.
func TestErrorsHaveTheAPIShape(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	s := &Service{log: log, clients: newClients("nats://127.0.0.1:1", nil, log, time.Minute, 1)}
	for _, tc := range []struct {
		name    string
		headers map[string]string
	}{
		{"no key", nil},
		{"not a credential", map[string]string{"x-api-key": "sk-ant-nonsense"}},
		{"a bearer token that is no credential", map[string]string{"Authorization": "Bearer c-123:x"}},
	} {
		req := httptest.NewRequest(http.MethodGet, "/v1/sessions", nil)
		for k, v := range tc.headers {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		s.routes().ServeHTTP(rec, req)
		var body wire.ErrorBody
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s: %v: %s", tc.name, err, rec.Body)
		}
		if rec.Code != http.StatusUnauthorized || body.Type != "error" || body.Error.Type != wire.Authentication || body.Error.Message == "" ||
			body.RequestID == "" || rec.Header().Get("request-id") != body.RequestID {
			t.Errorf("%s: %d %s, want 401 authentication_error with its request ID", tc.name, rec.Code, rec.Body)
		}
	}
}

// TestIdleConnectionsEnd checks that the API's server ends a kept-alive
// connection that waits for its next request: net/http keeps one for
// good unless told otherwise, so a client could hold any number of them
// open, a key or none.
func TestIdleConnectionsEnd(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	s := &Service{log: log, clients: newClients("nats://127.0.0.1:1", nil, log, time.Minute, 1)}
	srv := s.httpServer(t.Context())
	if srv.IdleTimeout <= 0 || srv.IdleTimeout > 5*time.Minute {
		t.Errorf("a kept-alive connection waits %v for its next request, want a bound of minutes at most", srv.IdleTimeout)
	}
	if srv.ReadHeaderTimeout <= 0 {
		t.Errorf("a request's headers may take %v to come, want a bound", srv.ReadHeaderTimeout)
	}
}

// TestUserHeaderIsBounded checks that a request naming a user no
// credential could name (too long, or with spaces around it) is refused
// before anything is asked of NATS: the user is a token of the subjects
// its requests go on.
func TestUserHeaderIsBounded(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	s := &Service{log: log, clients: newClients("nats://127.0.0.1:1", nil, log, time.Minute, 1)}
	for _, user := range []string{strings.Repeat("u", maxUser+1), " ada"} {
		req := httptest.NewRequest(http.MethodGet, "/v1/sessions", nil)
		req.Header.Set("x-api-key", "c-0123456789abcdef0123456789abcdef:secret")
		req.Header.Set(headerUser, user)
		rec := httptest.NewRecorder()
		s.routes().ServeHTTP(rec, req)
		var body wire.ErrorBody
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("%v: %s", err, rec.Body)
		}
		if rec.Code != http.StatusBadRequest || body.Error.Type != wire.InvalidRequest {
			t.Errorf("user %.20q…: %d %s, want 400 invalid_request_error", user, rec.Code, rec.Body)
		}
	}
}
