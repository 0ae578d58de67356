package modeltest

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// maxRequest bounds the request bodies the server reads.
const maxRequest = 64 << 20

// Server is a fake model provider. Create it with [New].
type Server struct {
	t      testing.TB
	srv    *httptest.Server
	script Script

	// scriptMu serializes script calls, so scripts need no locking.
	scriptMu sync.Mutex

	// cache is the prompt cache the requests are billed by.
	cache promptCache

	mu             sync.Mutex
	requests       []Conversation
	failStatus     int
	failRetryAfter string
	failLeft       int
}

// protocol is one provider's half of the server.
type protocol struct {
	name string
	// decode fills c from the request body and checks it as the real API
	// would; an error is answered with 400.
	decode func(body []byte, c *Conversation) error
	// bill says what a request's body is billed, by cache.
	bill func(cache *promptCache, body []byte) usage
	// reply renders the turn as a response body, reporting u.
	reply func(c Conversation, t Turn, u usage) (any, error)
	// errorBody renders an error response body.
	errorBody func(status int, msg string) any
	// requestIDHeader names the header that carries the request ID.
	requestIDHeader string
}

// New starts a fake model server whose replies s decides, and closes it when
// the test ends. A nil s answers every request with the text "ok".
func New(t testing.TB, s Script) *Server {
	t.Helper()
	if s == nil {
		s = func(Conversation) (Turn, error) { return Turn{Text: "ok"}, nil }
	}
	srv := &Server{t: t, script: s}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/messages", func(w http.ResponseWriter, r *http.Request) {
		srv.serve(w, r, anthropicProtocol)
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		srv.serve(w, r, openAIProtocol)
	})
	srv.srv = httptest.NewServer(mux)
	t.Cleanup(srv.srv.Close)
	return srv
}

// URL returns the server's base URL, such as http://127.0.0.1:PORT, to use
// as a client's base URL; the clients add /v1/....
func (s *Server) URL() string { return s.srv.URL }

// Requests returns every request received so far, in order, including those
// answered with an error. It is safe to call while requests are served.
func (s *Server) Requests() []Conversation {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Conversation(nil), s.requests...)
}

// FailNext makes the next n requests fail with status and a provider-shaped
// error body, with a retry-after header when retryAfter is not empty. The
// script is not called for them. It replaces any failures still pending.
func (s *Server) FailNext(status int, retryAfter string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failStatus, s.failRetryAfter, s.failLeft = status, retryAfter, n
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request, p protocol) {
	w.Header().Set(p.requestIDHeader, "req_"+rand.Text())
	var buf bytes.Buffer
	if r.ContentLength > 0 && r.ContentLength <= maxRequest {
		buf.Grow(int(r.ContentLength) + bytes.MinRead)
	}
	_, err := buf.ReadFrom(io.LimitReader(r.Body, maxRequest))
	body := buf.Bytes()
	if err != nil {
		s.fail(w, p, http.StatusBadRequest, "read request: "+err.Error())
		return
	}
	c := Conversation{Provider: p.name, APIKey: r.Header.Get("x-api-key")}
	if bearer, ok := strings.CutPrefix(r.Header.Get("authorization"), "Bearer "); ok {
		c.APIKey = bearer
	}
	decodeErr := p.decode(body, &c)
	if decodeErr == nil && p.name == "anthropic" && r.Header.Get("anthropic-version") == "" {
		decodeErr = fmt.Errorf("anthropic-version: header is required")
	}

	s.mu.Lock()
	s.requests = append(s.requests, c)
	status, retryAfter := 0, ""
	if s.failLeft > 0 {
		s.failLeft--
		status, retryAfter = s.failStatus, s.failRetryAfter
	}
	s.mu.Unlock()

	if decodeErr != nil {
		s.t.Logf("modeltest: %s request rejected: %v", p.name, decodeErr)
		s.fail(w, p, http.StatusBadRequest, decodeErr.Error())
		return
	}
	if status != 0 {
		if retryAfter != "" {
			w.Header().Set("retry-after", retryAfter)
		}
		s.fail(w, p, status, fmt.Sprintf("modeltest: injected %d", status))
		return
	}

	s.scriptMu.Lock()
	turn, err := s.script(c)
	s.scriptMu.Unlock()
	if err != nil {
		s.fail(w, p, http.StatusInternalServerError, err.Error())
		return
	}
	resp, err := p.reply(c, turn, p.bill(&s.cache, body))
	if err != nil {
		s.fail(w, p, http.StatusInternalServerError, "modeltest: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) fail(w http.ResponseWriter, p protocol, status int, msg string) {
	writeJSON(w, status, p.errorBody(status, msg))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("content-type", "application/json")
	w.WriteHeader(status)
	// A failed write means the client went away; there is no one to tell.
	_ = json.NewEncoder(w).Encode(v)
}

// outputTokens estimates the tokens of a reply at four bytes each.
func outputTokens(text string, args [][]byte, calls []Call) int {
	n := len(text)
	for i, c := range calls {
		n += len(c.Name) + len(args[i])
	}
	return max(1, n/4)
}

// callID returns the call's own ID, or a fresh one with prefix.
func callID(c Call, prefix string) string {
	if c.ID != "" {
		return c.ID
	}
	return prefix + rand.Text()
}
