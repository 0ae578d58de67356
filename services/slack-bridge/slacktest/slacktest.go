// Package slacktest is a fake Slack for tests: an [httptest.Server]
// speaking the Web API methods the bridge calls (chat.postMessage,
// chat.update, chat.postEphemeral, conversations.replies, and the file
// upload of files.uploadV2: files.getUploadURLExternal, a POST of the
// bytes to the upload URL, files.completeUploadExternal) the way Slack
// does — a bearer token checked, JSON or form bodies, {"ok":true,...} or
// {"ok":false,"error":...} answers, 429 with Retry-After when asked to —
// and keeping the messages, so a test reads a thread as Slack would show
// it. It also signs requests to the bridge the way Slack signs them, and
// builds the payloads of events, slash commands and button clicks.
package slacktest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Server is a fake Slack Web API.
type Server struct {
	srv   *httptest.Server
	token string

	mu         sync.Mutex
	calls      []Call
	msgs       []*Message
	clock      int64
	limitNext  int
	retryAfter string
	notIn      map[string]bool
	// uploads holds the files uploaded and not yet completed, by ID.
	uploads map[string]*File
	fileN   int
	failing map[string]string
}

// File is a file shared in a channel.
type File struct {
	ID, Name, Title string
	Content         []byte
}

// Call is one Web API call the server received.
type Call struct {
	Method      string
	ContentType string
	// Args are the call's arguments, from its JSON or form body.
	Args map[string]any
	// Status is the HTTP status it was answered with.
	Status int
	// At is when it was received.
	At time.Time
}

// Message is a message as Slack keeps it.
type Message struct {
	Channel  string
	TS       string
	ThreadTS string
	User     string // "" for the app's own
	Text     string
	Blocks   json.RawMessage
	Metadata json.RawMessage
	// Ephemeral messages are shown to User only and are in no thread's
	// history.
	Ephemeral bool
	// Updates counts chat.update calls on it.
	Updates int
	// Files are the files it shares.
	Files []File
}

// New starts a fake Slack accepting the bot token token, closed when the
// test ends.
func New(t testing.TB, token string) *Server {
	t.Helper()
	s := &Server{token: token, clock: 1_700_000_000_000_000, notIn: make(map[string]bool), uploads: make(map[string]*File), failing: make(map[string]string)}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

// URL is the Web API's base URL, as CORRAL_SLACK_API_URL.
func (s *Server) URL() string { return s.srv.URL + "/api" }

// RateLimitNext answers the next n calls with 429 and Retry-After:
// retryAfter (seconds).
func (s *Server) RateLimitNext(n int, retryAfter string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limitNext, s.retryAfter = n, retryAfter
}

// NotInChannel makes posts to channel fail with not_in_channel, as for a
// channel the app was not invited to.
func (s *Server) NotInChannel(channel string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.notIn[channel] = true
}

// Fail makes every call of method fail with Slack's error code, as for a
// method the app lacks the scope of ("missing_scope").
func (s *Server) Fail(method, code string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failing[method] = code
}

// Post adds a person's message to channel (in the thread threadTS, if not
// empty) and returns its ts: what a test then sends the bridge an event
// about.
func (s *Server) Post(channel, threadTS, user, text string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := &Message{Channel: channel, TS: s.nextTS(), ThreadTS: threadTS, User: user, Text: text}
	s.msgs = append(s.msgs, m)
	return m.TS
}

// Calls returns the calls of method received so far ("" for all).
func (s *Server) Calls(method string) []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Call
	for _, c := range s.calls {
		if method == "" || c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

// Thread returns the messages of the thread ts of channel, its first
// included, oldest first.
func (s *Server) Thread(channel, ts string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.thread(channel, ts)
}

func (s *Server) thread(channel, ts string) []Message {
	var out []Message
	for _, m := range s.msgs {
		if m.Channel == channel && !m.Ephemeral && (m.TS == ts || m.ThreadTS == ts) {
			out = append(out, *m)
		}
	}
	return out
}

// Messages returns the messages of channel, oldest first, ephemeral ones
// left out.
func (s *Server) Messages(channel string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Message
	for _, m := range s.msgs {
		if m.Channel == channel && !m.Ephemeral {
			out = append(out, *m)
		}
	}
	return out
}

// Ephemerals returns the ephemeral messages shown to user.
func (s *Server) Ephemerals(user string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Message
	for _, m := range s.msgs {
		if m.Ephemeral && m.User == user {
			out = append(out, *m)
		}
	}
	return out
}

// Message returns the message ts of channel.
func (s *Server) Message(channel, ts string) (Message, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := s.find(channel, ts); m != nil {
		return *m, true
	}
	return Message{}, false
}

func (s *Server) find(channel, ts string) *Message {
	for _, m := range s.msgs {
		if m.Channel == channel && m.TS == ts && !m.Ephemeral {
			return m
		}
	}
	return nil
}

// nextTS returns a new message ts: seconds and microseconds, increasing.
func (s *Server) nextTS() string {
	s.clock += 100
	return fmt.Sprintf("%d.%06d", s.clock/1_000_000, s.clock%1_000_000)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if id, ok := strings.CutPrefix(r.URL.Path, "/upload/"); ok && r.Method == http.MethodPost {
		s.upload(w, r, id)
		return
	}
	method, ok := strings.CutPrefix(r.URL.Path, "/api/")
	if !ok || r.Method != http.MethodPost {
		http.NotFound(w, r)
		return
	}
	args, err := readArgs(r)
	c := Call{Method: method, ContentType: r.Header.Get("Content-Type"), Args: args, Status: http.StatusOK, At: time.Now()}
	s.mu.Lock()
	defer s.mu.Unlock()
	defer func() { s.calls = append(s.calls, c) }()
	if s.limitNext > 0 {
		s.limitNext--
		c.Status = http.StatusTooManyRequests
		w.Header().Set("Retry-After", s.retryAfter)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, `{"ok":false,"error":"ratelimited"}`)
		return
	}
	answer := func(v map[string]any) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		_ = json.NewEncoder(w).Encode(v)
	}
	fail := func(code string) { answer(map[string]any{"ok": false, "error": code}) }
	auth := r.Header.Get("Authorization")
	switch {
	case err != nil:
		fail("invalid_form_data")
		return
	case auth == "":
		fail("not_authed")
		return
	case auth != "Bearer "+s.token:
		fail("invalid_auth")
		return
	}
	if code := s.failing[method]; code != "" {
		fail(code)
		return
	}
	str := func(k string) string { v, _ := args[k].(string); return v }
	raw := func(k string) json.RawMessage {
		switch v := args[k].(type) {
		case nil:
			return nil
		case string: // form bodies carry JSON as strings
			return json.RawMessage(v)
		default:
			b, _ := json.Marshal(v)
			return b
		}
	}
	channel := str("channel")
	switch method {
	case "chat.postMessage":
		switch {
		case channel == "":
			fail("channel_not_found")
		case s.notIn[channel]:
			fail("not_in_channel")
		case str("text") == "" && len(raw("blocks")) == 0:
			fail("no_text")
		case str("thread_ts") != "" && s.find(channel, str("thread_ts")) == nil:
			fail("thread_not_found")
		default:
			m := &Message{Channel: channel, TS: s.nextTS(), ThreadTS: str("thread_ts"), Text: str("text"), Blocks: raw("blocks"), Metadata: raw("metadata")}
			s.msgs = append(s.msgs, m)
			answer(map[string]any{"ok": true, "channel": channel, "ts": m.TS, "message": map[string]any{"type": "message", "text": m.Text, "ts": m.TS, "bot_id": "B0BOT"}})
		}
	case "chat.update":
		m := s.find(channel, str("ts"))
		switch {
		case m == nil:
			fail("message_not_found")
		case str("text") == "" && len(raw("blocks")) == 0:
			fail("no_text")
		default:
			m.Text, m.Updates = str("text"), m.Updates+1
			if b := raw("blocks"); b != nil {
				m.Blocks = b
			}
			answer(map[string]any{"ok": true, "channel": channel, "ts": m.TS, "text": m.Text})
		}
	case "chat.postEphemeral":
		switch {
		case channel == "":
			fail("channel_not_found")
		case str("user") == "":
			fail("user_not_found")
		case str("text") == "" && len(raw("blocks")) == 0:
			fail("no_text")
		default:
			m := &Message{Channel: channel, TS: s.nextTS(), ThreadTS: str("thread_ts"), User: str("user"), Text: str("text"), Ephemeral: true}
			s.msgs = append(s.msgs, m)
			answer(map[string]any{"ok": true, "message_ts": m.TS})
		}
	case "conversations.replies":
		msgs := s.thread(channel, str("ts"))
		if len(msgs) == 0 {
			fail("thread_not_found")
			return
		}
		withMeta := str("include_all_metadata") == "true" || str("include_all_metadata") == "1"
		var out []map[string]any
		for _, m := range msgs {
			o := map[string]any{"type": "message", "ts": m.TS, "text": m.Text}
			if m.ThreadTS != "" {
				o["thread_ts"] = m.ThreadTS
			}
			if m.User != "" {
				o["user"] = m.User
			} else {
				o["bot_id"] = "B0BOT"
			}
			if withMeta && len(m.Metadata) > 0 {
				o["metadata"] = json.RawMessage(m.Metadata)
			}
			out = append(out, o)
		}
		answer(map[string]any{"ok": true, "messages": out, "has_more": false, "response_metadata": map[string]any{"next_cursor": ""}})
	case "files.getUploadURLExternal":
		n, err := strconv.Atoi(str("length"))
		switch {
		case str("filename") == "":
			fail("invalid_arguments")
		case err != nil || n <= 0:
			fail("invalid_arguments")
		default:
			s.fileN++
			f := &File{ID: fmt.Sprintf("F%08d", s.fileN), Name: str("filename")}
			s.uploads[f.ID] = f
			answer(map[string]any{"ok": true, "upload_url": s.srv.URL + "/upload/" + f.ID, "file_id": f.ID})
		}
	case "files.completeUploadExternal":
		var files []struct {
			ID    string `json:"id"`
			Title string `json:"title"`
		}
		if json.Unmarshal(raw("files"), &files) != nil || len(files) == 0 {
			fail("invalid_arguments")
			return
		}
		channel := str("channel_id")
		thread := str("thread_ts")
		if channel == "" {
			fail("channel_not_found") // Slack would keep the files private; no test wants that
			return
		}
		if thread != "" && s.find(channel, thread) == nil {
			fail("thread_not_found")
			return
		}
		m := &Message{Channel: channel, TS: s.nextTS(), ThreadTS: thread, Text: str("initial_comment")}
		for _, x := range files {
			f := s.uploads[x.ID]
			if f == nil || f.Content == nil {
				fail("file_not_found")
				return
			}
			f.Title = x.Title
			m.Files = append(m.Files, *f)
			delete(s.uploads, x.ID)
		}
		s.msgs = append(s.msgs, m)
		answer(map[string]any{"ok": true, "files": files})
	default:
		fail("unknown_method")
	}
}

// upload takes the bytes of file id, sent to the URL
// files.getUploadURLExternal gave: no token, the body the file.
func (s *Server) upload(w http.ResponseWriter, r *http.Request, id string) {
	body, err := io.ReadAll(r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.uploads[id]
	if err != nil || f == nil {
		http.Error(w, "no such upload", http.StatusNotFound)
		return
	}
	f.Content = body
	_, _ = io.WriteString(w, "OK - "+strconv.Itoa(len(body)))
}

// readArgs decodes a Web API call's arguments from its JSON or form body
// (and its query string).
func readArgs(r *http.Request) (map[string]any, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	args := make(map[string]any)
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(body, &args); err != nil {
			return nil, err
		}
	} else {
		form, err := url.ParseQuery(string(body))
		if err != nil {
			return nil, err
		}
		for k, v := range form {
			args[k] = v[0]
		}
	}
	for k, v := range r.URL.Query() {
		if _, ok := args[k]; !ok {
			args[k] = v[0]
		}
	}
	return args, nil
}

// Texts returns the texts of msgs.
func Texts(msgs []Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.Text
	}
	return out
}

// HasButtons reports whether m carries an actions block.
func (m Message) HasButtons() bool {
	var blocks []struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(m.Blocks, &blocks)
	return slices.ContainsFunc(blocks, func(b struct {
		Type string `json:"type"`
	}) bool {
		return b.Type == "actions"
	})
}
