package gateway

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
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
