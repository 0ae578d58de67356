package model_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"corral.dev/pkg/model"
)

// provider makes a client of one provider and knows its success and error bodies.
type provider struct {
	name     string
	new      func(model.Config) model.Client
	ok       string
	errorFor func(typ, msg string) string
}

var providers = []provider{
	{
		name: "anthropic", new: model.NewAnthropic, ok: anthropicReply,
		errorFor: func(typ, msg string) string {
			return `{"type":"error","error":{"type":"` + typ + `","message":"` + msg + `"}}`
		},
	},
	{
		name: "openai", new: model.NewOpenAI, ok: openAIReply,
		errorFor: func(typ, msg string) string {
			return `{"error":{"message":"` + msg + `","type":"` + typ + `","param":null,"code":null}}`
		},
	},
}

func TestRetries(t *testing.T) {
	t.Parallel()
	type failure struct {
		status  int
		headers []string
	}
	tests := []struct {
		name     string
		failures []failure // answered in order before a success
		attempts int       // MaxAttempts; zero for the default
		wantN    int       // requests the server should see
		wantErr  bool
		wantPerm bool
	}{
		{name: "429 retry-after 0", failures: []failure{{429, []string{"retry-after", "0"}}, {429, []string{"retry-after", "0"}}}, wantN: 3},
		{name: "429 retry-after-ms", failures: []failure{{429, []string{"retry-after-ms", "5", "retry-after", "100"}}}, wantN: 2},
		{name: "529 overloaded", failures: []failure{{529, nil}}, wantN: 2},
		{name: "500 then 503", failures: []failure{{500, nil}, {503, nil}}, wantN: 3},
		{name: "408 and 409", failures: []failure{{408, nil}, {409, nil}}, wantN: 3},
		{name: "exhausted", failures: []failure{{503, nil}, {503, nil}, {503, nil}}, attempts: 3, wantN: 3, wantErr: true},
		{name: "retry-after too long", failures: []failure{{429, []string{"retry-after", "3600"}}}, wantN: 1, wantErr: true},
		{name: "400", failures: []failure{{400, nil}}, wantN: 1, wantErr: true, wantPerm: true},
		{name: "401", failures: []failure{{401, nil}}, wantN: 1, wantErr: true, wantPerm: true},
		{name: "404", failures: []failure{{404, nil}}, wantN: 1, wantErr: true, wantPerm: true},
		{name: "501", failures: []failure{{501, nil}}, wantN: 1, wantErr: true},
	}
	for _, p := range providers {
		for _, tc := range tests {
			t.Run(p.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				api := newFakeAPI(t, func(n int, w http.ResponseWriter, r *http.Request) {
					if n > len(tc.failures) {
						reply(w, http.StatusOK, p.ok)
						return
					}
					f := tc.failures[n-1]
					reply(w, f.status, p.errorFor("some_error", "the reason"), f.headers...)
				})
				c := p.new(model.Config{APIKey: "k", BaseURL: api.URL, MaxAttempts: tc.attempts, Backoff: time.Millisecond})
				_, err := c.Complete(t.Context(), conversation(0))
				if got := len(api.requests()); got != tc.wantN {
					t.Errorf("requests = %d, want %d", got, tc.wantN)
				}
				if (err != nil) != tc.wantErr {
					t.Fatalf("err = %v, want error %v", err, tc.wantErr)
				}
				if err == nil {
					return
				}
				if got := errors.Is(err, model.ErrPermanent); got != tc.wantPerm {
					t.Errorf("errors.Is(%v, ErrPermanent) = %v, want %v", err, got, tc.wantPerm)
				}
				var apiErr *model.APIError
				if !errors.As(err, &apiErr) {
					t.Fatalf("err = %v, want an *APIError in it", err)
				}
				last := tc.failures[tc.wantN-1]
				if apiErr.Status != last.status || apiErr.Provider != p.name || apiErr.Type != "some_error" || apiErr.Message != "the reason" {
					t.Errorf("APIError = %+v, want status %d from %s with some_error: the reason", apiErr, last.status, p.name)
				}
			})
		}
	}
}

func TestRetryTransportError(t *testing.T) {
	t.Parallel()
	for _, p := range providers {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t, func(n int, w http.ResponseWriter, r *http.Request) {
				switch n {
				case 1: // drop the connection
					conn, _, err := http.NewResponseController(w).Hijack()
					if err != nil {
						t.Errorf("hijack: %v", err)
						return
					}
					conn.Close()
				case 2: // outlast the per-attempt timeout
					<-r.Context().Done()
				default:
					reply(w, http.StatusOK, p.ok)
				}
			})
			c := p.new(model.Config{BaseURL: api.URL, Backoff: time.Millisecond, Timeout: 100 * time.Millisecond})
			if _, err := c.Complete(t.Context(), conversation(0)); err != nil {
				t.Fatalf("Complete: %v", err)
			}
			if got := len(api.requests()); got != 3 {
				t.Errorf("requests = %d, want 3", got)
			}
		})
	}
}

func TestRetryStopsWithContext(t *testing.T) {
	t.Parallel()
	for _, p := range providers {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			api := newFakeAPI(t, func(n int, w http.ResponseWriter, r *http.Request) {
				reply(w, http.StatusServiceUnavailable, p.errorFor("overloaded", "busy"), "retry-after", "50")
				cancel()
			})
			c := p.new(model.Config{BaseURL: api.URL, Backoff: time.Hour})
			start := time.Now()
			_, err := c.Complete(ctx, conversation(0))
			if !errors.Is(err, context.Canceled) {
				t.Errorf("err = %v, want context.Canceled", err)
			}
			if errors.Is(err, model.ErrPermanent) {
				t.Errorf("err = %v matches ErrPermanent", err)
			}
			if got := len(api.requests()); got != 1 {
				t.Errorf("requests = %d, want 1", got)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("Complete took %v after cancellation", d)
			}
		})
	}
}

func TestRetryWouldPassDeadline(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, func(n int, w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusTooManyRequests, providers[0].errorFor("rate_limit_error", "slow down"), "retry-after", "30")
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c := model.NewAnthropic(model.Config{BaseURL: api.URL})
	_, err := c.Complete(ctx, conversation(0))
	var apiErr *model.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusTooManyRequests {
		t.Fatalf("err = %v, want the 429 APIError", err)
	}
	if errors.Is(err, model.ErrPermanent) {
		t.Errorf("err = %v matches ErrPermanent", err)
	}
	if ctx.Err() != nil {
		t.Errorf("Complete waited out the deadline")
	}
}

func TestErrorRedactsKey(t *testing.T) {
	t.Parallel()
	const key = "sk-very-secret-123"
	for _, p := range providers {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t, func(n int, w http.ResponseWriter, r *http.Request) {
				reply(w, http.StatusUnauthorized, p.errorFor("authentication_error", "bad key "+key), "request-id", "req_42")
			})
			c := p.new(model.Config{APIKey: key, BaseURL: api.URL})
			_, err := c.Complete(t.Context(), conversation(0))
			if err == nil {
				t.Fatal("Complete succeeded, want an error")
			}
			if strings.Contains(err.Error(), key) {
				t.Errorf("error %q contains the key", err)
			}
			want := p.name + ": status 401 authentication_error: bad key REDACTED (request req_42)"
			if err.Error() != want {
				t.Errorf("error = %q, want %q", err, want)
			}
		})
	}
}

func TestUnshapedErrorBody(t *testing.T) {
	t.Parallel()
	tests := []struct {
		body, wantType, wantMessage string
	}{
		{`{"error":"model 'llama9' not found"}`, "", "model 'llama9' not found"},
		{`{"error":{"message":"bad","code":"invalid_value"}}`, "invalid_value", "bad"},
		{`<html>Bad Request</html>`, "", "<html>Bad Request</html>"},
		{``, "", "Bad Request"},
	}
	for _, tc := range tests {
		api := newFakeAPI(t, func(n int, w http.ResponseWriter, r *http.Request) {
			reply(w, http.StatusBadRequest, tc.body)
		})
		_, err := model.NewOpenAI(model.Config{BaseURL: api.URL}).Complete(t.Context(), conversation(0))
		var apiErr *model.APIError
		if !errors.As(err, &apiErr) {
			t.Fatalf("body %s: err = %v, want an *APIError", tc.body, err)
		}
		if apiErr.Type != tc.wantType || apiErr.Message != tc.wantMessage {
			t.Errorf("body %s: type, message = %q, %q; want %q, %q", tc.body, apiErr.Type, apiErr.Message, tc.wantType, tc.wantMessage)
		}
	}
}
