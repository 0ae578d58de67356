package modeltest

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
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
	cutLeft        int
	errorKind      string
	errorLeft      int
	window         int
	// issued holds the thinking block sent with each tool call, by the
	// call's ID, for the requests that send the call back.
	issued map[string]thinking
}

// protocol is one provider's half of the server.
type protocol struct {
	name string
	// decode fills c from the request body and checks it as the real API
	// would; an error is answered with 400, or as a [*rejection] says.
	decode func(s *Server, body []byte, c *Conversation) error
	// segments splits a request's prompt into its pieces, and returns
	// the key it is cached under.
	segments func(body []byte) ([]segment, string)
	// bill says what a request's prompt is billed, by cache.
	bill func(cache *promptCache, key string, segs []segment) usage
	// tooLong is the rejection of a prompt of n tokens, over window.
	tooLong func(n, window int) *rejection
	// reply renders the turn, reporting u.
	reply func(s *Server, c Conversation, t Turn, u usage) (reply, error)
	// errorBody renders an error response body.
	errorBody func(r *rejection) any
	// errorEvent renders the error event of a stream that fails with kind.
	errorEvent func(kind string) event
	// requestIDHeader names the header that carries the request ID.
	requestIDHeader string
}

// rejection is an error answered with status and a provider-shaped body.
// Empty fields take the status's usual values.
type rejection struct {
	status           int
	typ, code, param string
	msg              string
}

func (r *rejection) Error() string { return r.msg }

// New starts a fake model server whose replies s decides, and closes it when
// the test ends. A nil s answers every request with the text "ok".
func New(t testing.TB, s Script) *Server {
	t.Helper()
	if s == nil {
		s = func(Conversation) (Turn, error) { return Turn{Text: "ok"}, nil }
	}
	srv := &Server{t: t, script: s, issued: make(map[string]thinking)}
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

// CutNext cuts the replies to the next n requests the script answers in
// the middle: a streamed reply right after its first text delta (or, with
// no text, its first delta), a reply that is not streamed after half its
// body; the connection is then closed. It replaces any cuts still pending.
func (s *Server) CutNext(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cutLeft = n
}

// ErrorEventNext ends the streamed replies to the next n requests the
// script answers with an error event of kind, one of Anthropic's error
// types, right after their first text delta (or, with no text, their
// first delta): "overloaded_error", "api_error" and "rate_limit_error",
// which clients retry, or "invalid_request_error", say, which they do
// not. The OpenAI half sends the error chunk of the same failure (a
// server_error, or a rate_limit_exceeded for rate_limit_error). A reply
// that is not streamed fails instead with the status kind stands for
// (529, 500, 429, 400...). It replaces any error events still pending.
func (s *Server) ErrorEventNext(kind string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errorKind, s.errorLeft = kind, n
}

// SetContextWindow makes the server reject, as the provider does, a
// request whose prompt has more than tokens tokens, counted as the fake
// bills them (see the package's cache accounting): Anthropic with "prompt
// is too long: N tokens > M maximum", OpenAI with the code
// context_length_exceeded. Zero, the default, accepts any length.
func (s *Server) SetContextWindow(tokens int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.window = tokens
}

// fault is what goes wrong with one reply.
type fault struct {
	cut       bool
	errorKind string
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
		s.fail(w, p, &rejection{status: http.StatusBadRequest, msg: "read request: " + err.Error()})
		return
	}
	c := Conversation{Provider: p.name, APIKey: r.Header.Get("x-api-key"), Body: body, Received: time.Now()}
	if bearer, ok := strings.CutPrefix(r.Header.Get("authorization"), "Bearer "); ok {
		c.APIKey = bearer
	}
	decodeErr := p.decode(s, body, &c)
	if decodeErr == nil && p.name == "anthropic" && r.Header.Get("anthropic-version") == "" {
		decodeErr = fmt.Errorf("anthropic-version: header is required")
	}
	var segs []segment
	var key string
	if decodeErr == nil {
		segs, key = p.segments(body)
	}

	s.mu.Lock()
	s.requests = append(s.requests, c)
	status, retryAfter := 0, ""
	if s.failLeft > 0 {
		s.failLeft--
		status, retryAfter = s.failStatus, s.failRetryAfter
	}
	if n := promptTokens(segs); decodeErr == nil && s.window > 0 && n > s.window {
		decodeErr = p.tooLong(n, s.window)
	}
	s.mu.Unlock()

	if decodeErr != nil {
		s.t.Logf("modeltest: %s request rejected: %v", p.name, decodeErr)
		rej, ok := errors.AsType[*rejection](decodeErr)
		if !ok {
			rej = &rejection{status: http.StatusBadRequest, msg: decodeErr.Error()}
		}
		s.fail(w, p, rej)
		return
	}
	if status != 0 {
		if retryAfter != "" {
			w.Header().Set("retry-after", retryAfter)
		}
		s.fail(w, p, &rejection{status: status, msg: fmt.Sprintf("modeltest: injected %d", status)})
		return
	}

	s.scriptMu.Lock()
	turn, err := s.script(c)
	s.scriptMu.Unlock()
	if err != nil {
		s.fail(w, p, &rejection{status: http.StatusInternalServerError, msg: err.Error()})
		return
	}
	rep, err := p.reply(s, c, turn, p.bill(&s.cache, key, segs))
	if err != nil {
		s.fail(w, p, &rejection{status: http.StatusInternalServerError, msg: "modeltest: " + err.Error()})
		return
	}

	var f fault
	s.mu.Lock()
	switch {
	case s.cutLeft > 0:
		s.cutLeft--
		f.cut = true
	case s.errorLeft > 0:
		s.errorLeft--
		f.errorKind = s.errorKind
	}
	s.mu.Unlock()

	if c.Stream {
		s.stream(w, r, p, rep, turn, f)
		return
	}
	if turn.Hold != nil {
		select {
		case <-turn.Hold:
		case <-r.Context().Done():
			return
		}
	}
	switch {
	case f.errorKind != "":
		s.fail(w, p, &rejection{status: kindStatus(f.errorKind), msg: "modeltest: injected " + f.errorKind})
	case f.cut:
		data, err := json.Marshal(rep.whole)
		if err != nil {
			panic(err) // a reply always marshals
		}
		w.Header().Set("content-type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(data[:len(data)/2])
		_ = http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler)
	default:
		writeJSON(w, http.StatusOK, rep.whole)
	}
}

func (s *Server) fail(w http.ResponseWriter, p protocol, r *rejection) {
	writeJSON(w, r.status, p.errorBody(r))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("content-type", "application/json")
	w.WriteHeader(status)
	// A failed write means the client went away; there is no one to tell.
	_ = json.NewEncoder(w).Encode(v)
}

// kindStatus returns the status an Anthropic error type stands for.
func kindStatus(kind string) int {
	switch kind {
	case "invalid_request_error":
		return 400
	case "authentication_error":
		return 401
	case "permission_error":
		return 403
	case "not_found_error":
		return 404
	case "request_too_large":
		return 413
	case "rate_limit_error":
		return 429
	case "overloaded_error":
		return 529
	}
	return 500
}

// promptTokens counts the tokens of a prompt's pieces.
func promptTokens(segs []segment) int {
	n := 0
	for _, s := range segs {
		n += s.tokens
	}
	return n
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
