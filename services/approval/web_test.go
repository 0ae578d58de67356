package approval

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/natstest"
)

const (
	aliceToken = "alice-token-0123456789"
	bobToken   = "bob-token-0123456789ab"
)

type fixture struct {
	svc *Service
	js  jetstream.JetStream
	srv *httptest.Server
}

func start(t *testing.T, mutate func(*Config)) *fixture {
	t.Helper()
	_, _, js := natstest.Run(t)
	_, key, _ := ed25519.GenerateKey(nil)
	cfg := Config{
		SigningKey:  key,
		Reviewers:   map[string]string{aliceToken: "alice", bobToken: "bob"},
		Sweep:       50 * time.Millisecond,
		Concurrency: 4,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := New(ctx, cfg, js, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	srv := httptest.NewServer(svc.Handler())
	t.Cleanup(func() {
		srv.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return &fixture{svc: svc, js: js, srv: srv}
}

// ask records an approval request as the harness would and waits until
// the service keeps it.
func (f *fixture) ask(t *testing.T, tool string, input string) *event.ApprovalRequested {
	t.Helper()
	session := uuid.Must(uuid.NewV7())
	req := &event.SessionRequested{Header: event.NewHeader(event.TypeSessionRequested, "acme", session), Request: uuid.New(), User: "ada", Model: "openai:x", Prompt: "ship the release"}
	if err := bus.Record(context.Background(), f.js, req, "r"+session.String()); err != nil {
		t.Fatal(err)
	}
	ev := &event.ApprovalRequested{
		Header: event.NewHeader(event.TypeApprovalRequested, "acme", session),
		Call:   uuid.Must(uuid.NewV7()), Turn: 1, User: "ada", Tool: tool, Input: json.RawMessage(input),
		ArgsHash: event.ArgsHash(tool, json.RawMessage(input)), Rule: "risky-shell", Reason: "pushes code",
	}
	if err := bus.Record(context.Background(), f.js, ev, ev.Call.String()+":approval"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(f.svc.list("acme", Pending)) == 0 || !f.has(ev.Call) {
		if time.Now().After(deadline) {
			t.Fatal("the approval never showed up")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return ev
}

func (f *fixture) has(id uuid.UUID) bool {
	for _, a := range f.svc.list("") {
		if a.ID == id {
			return true
		}
	}
	return false
}

// client returns a browser-like client: it keeps cookies and does not
// follow redirects, so tests see them.
func (f *fixture) client(t *testing.T) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func (f *fixture) signIn(t *testing.T, c *http.Client, token string) string {
	t.Helper()
	resp, err := c.PostForm(f.srv.URL+"/signin", url.Values{"token": {token}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign in: %s", resp.Status)
	}
	_, body := get(t, c, f.srv.URL+"/")
	i := strings.Index(body, `name="csrf" value="`)
	if i < 0 {
		t.Fatalf("no CSRF token on the page:\n%s", body)
	}
	rest := body[i+len(`name="csrf" value="`):]
	return rest[:strings.IndexByte(rest, '"')]
}

func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func post(t *testing.T, c *http.Client, u string, form url.Values, header http.Header) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestPageRefusesStrangers(t *testing.T) {
	f := start(t, nil)
	a := f.ask(t, "Bash", `{"command":"git push"}`)
	c := f.client(t)
	if code, _ := get(t, c, f.srv.URL+"/"); code != http.StatusSeeOther {
		t.Errorf("GET / signed out: %d, want a redirect to sign in", code)
	}
	if code, body := get(t, c, f.srv.URL+"/live"); code != http.StatusUnauthorized || strings.Contains(body, "git push") {
		t.Errorf("GET /live signed out: %d", code)
	}
	form := url.Values{"id": {a.Call.String()}, "session": {a.Session.String()}, "verdict": {"approve"}, "csrf": {"x"}}
	if code, _ := post(t, c, f.srv.URL+"/decide", form, nil); code != http.StatusUnauthorized {
		t.Errorf("POST /decide signed out: %d, want 401", code)
	}
	if code, body := post(t, c, f.srv.URL+"/signin", url.Values{"token": {"not-a-token-at-all"}}, nil); code != http.StatusUnauthorized || !strings.Contains(body, "not a reviewer") {
		t.Errorf("sign in with a wrong token: %d", code)
	}
	// A cookie made up by hand does not sign anyone in.
	forged := &http.Cookie{Name: cookieName, Value: "YWxpY2UAOTk5OTk5OTk5OQB4.c2ln"}
	u, _ := url.Parse(f.srv.URL)
	c.Jar.SetCookies(u, []*http.Cookie{forged})
	if code, _ := post(t, c, f.srv.URL+"/decide", form, nil); code != http.StatusUnauthorized {
		t.Errorf("POST /decide with a forged cookie: %d, want 401", code)
	}
	if got := f.svc.list("acme", Pending); len(got) != 1 {
		t.Errorf("approval decided by a stranger: %+v", got)
	}
}

func TestDecisionsNeedTheirCSRFToken(t *testing.T) {
	f := start(t, nil)
	a := f.ask(t, "Bash", `{"command":"git push"}`)
	alice, bob := f.client(t), f.client(t)
	aliceCSRF := f.signIn(t, alice, aliceToken)
	bobCSRF := f.signIn(t, bob, bobToken)
	form := func(csrf string) url.Values {
		v := url.Values{"id": {a.Call.String()}, "session": {a.Session.String()}, "verdict": {"approve"}, "reason": {"ok"}}
		if csrf != "" {
			v.Set("csrf", csrf)
		}
		return v
	}
	for name, csrf := range map[string]string{"missing": "", "forged": "Zm9yZ2Vk", "another reviewer's": bobCSRF} {
		if code, body := post(t, alice, f.srv.URL+"/decide", form(csrf), nil); code != http.StatusForbidden || !strings.Contains(body, "CSRF") {
			t.Errorf("%s CSRF token: %d %s", name, code, body)
		}
	}
	// A form posted from another site is refused whatever it carries.
	cross := http.Header{"Origin": {"https://evil.example"}, "Sec-Fetch-Site": {"cross-site"}}
	if code, _ := post(t, alice, f.srv.URL+"/decide", form(aliceCSRF), cross); code != http.StatusForbidden {
		t.Errorf("cross-site form: %d, want 403", code)
	}
	if got := f.svc.list("acme", Pending); len(got) != 1 {
		t.Fatalf("approval decided by a forged form: %+v", got)
	}

	if code, _ := post(t, alice, f.srv.URL+"/decide", form(aliceCSRF), nil); code != http.StatusSeeOther {
		t.Fatalf("alice's decision: %d", code)
	}
	// Bob's click comes second: refused, saying who decided.
	code, body := post(t, bob, f.srv.URL+"/decide", url.Values{"id": {a.Call.String()}, "session": {a.Session.String()}, "verdict": {"deny"}, "reason": {"no"}, "csrf": {bobCSRF}}, nil)
	if code != http.StatusConflict || !strings.Contains(body, "already approved by alice") {
		t.Errorf("second decision: %d\n%s", code, body)
	}
	// The signed decision is in the session's log.
	msgs, err := bus.ReadAll(context.Background(), f.js, bus.StreamEvents, bus.EventSubject("acme", a.Session, event.TypeApprovalDecided))
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 {
		t.Fatalf("%d decisions in the log, want 1", len(msgs))
	}
	var d event.ApprovalDecided
	if err := json.Unmarshal(msgs[0].Data, &d); err != nil {
		t.Fatal(err)
	}
	pub := f.svc.cfg.SigningKey.Public().(ed25519.PublicKey)
	if err := d.Verify(pub, "acme", a.Session, a.Call, a.ArgsHash); err != nil || !d.Approved || d.Reviewer != "alice" {
		t.Errorf("decision %+v: %v", d, err)
	}
	// Signing out ends the sign-in, even for a copy of the cookie kept.
	u, _ := url.Parse(f.srv.URL)
	kept := alice.Jar.Cookies(u)
	if code, _ := post(t, alice, f.srv.URL+"/signout", url.Values{"csrf": {aliceCSRF}}, nil); code != http.StatusSeeOther {
		t.Errorf("sign out: %d", code)
	}
	if code, _ := get(t, alice, f.srv.URL+"/"); code != http.StatusSeeOther {
		t.Errorf("GET / after signing out: %d", code)
	}
	replay := f.client(t)
	replay.Jar.SetCookies(u, kept)
	if code, _ := get(t, replay, f.srv.URL+"/"); code != http.StatusSeeOther {
		t.Errorf("GET / with the cookie kept from before signing out: %d, want a redirect to sign in", code)
	}
}

func TestPageShowsContextAndEditDiff(t *testing.T) {
	f := start(t, nil)
	f.ask(t, "Edit", `{"file_path":"/skills/deploy/SKILL.md","old_string":"run make deploy","new_string":"run make deploy-canary"}`)
	c := f.client(t)
	f.signIn(t, c, aliceToken)
	_, page := get(t, c, f.srv.URL+"/")
	body := html.UnescapeString(page)
	for _, want := range []string{"ship the release", "ada", "acme", "--- a/skills/deploy/SKILL.md", "-run make deploy", "+run make deploy-canary", `name="viewport"`} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
}

func TestTrustedHeaderSignsIn(t *testing.T) {
	f := start(t, func(c *Config) { c.ReviewerHeader = "X-Forwarded-User" })
	a := f.ask(t, "Bash", `{"command":"git push"}`)
	c := f.client(t)
	if code, _ := get(t, c, f.srv.URL+"/"); code != http.StatusSeeOther {
		t.Errorf("no header: %d, want a redirect", code)
	}
	req, _ := http.NewRequest(http.MethodGet, f.srv.URL+"/", nil)
	req.Header.Set("X-Forwarded-User", "carol")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	body := string(b)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "carol") {
		t.Fatalf("with the header: %d", resp.StatusCode)
	}
	i := strings.Index(body, `name="csrf" value="`) + len(`name="csrf" value="`)
	csrf := body[i : i+strings.IndexByte(body[i:], '"')]
	h := http.Header{"X-Forwarded-User": {"carol"}}
	form := url.Values{"id": {a.Call.String()}, "session": {a.Session.String()}, "verdict": {"deny"}, "reason": {"not today"}, "csrf": {csrf}}
	if code, _ := post(t, c, f.srv.URL+"/decide", form, h); code != http.StatusSeeOther {
		t.Fatalf("decide: %d", code)
	}
	got := f.svc.list("acme", Denied)
	if len(got) != 1 || got[0].Reviewer != "carol" || got[0].Reason != "not today" {
		t.Errorf("denied = %+v", got)
	}
}

// A carriage return in a call cannot end a live update early: each update
// is one line of JSON holding the whole part of the page.
func TestLiveUpdatesCarryCarriageReturnsSafely(t *testing.T) {
	f := start(t, nil)
	c := f.client(t)
	f.signIn(t, c, aliceToken)
	a := f.ask(t, "Bash", `{"command":"rm -rf ~\r\revent: update\rdata: echo hello\r"}`)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.srv.URL+"/live", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 1<<20)
	var got []byte
	for !bytes.Contains(got, []byte("\n\n")) {
		n, err := resp.Body.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			t.Fatalf("read the first update: %v (%q)", err, got)
		}
	}
	first := string(got[:bytes.Index(got, []byte("\n\n"))])
	if strings.ContainsRune(first, '\r') {
		t.Fatalf("a raw carriage return reached the stream: %q", first)
	}
	lines := strings.Split(first, "\n")
	if len(lines) != 2 || lines[0] != "event: update" || !strings.HasPrefix(lines[1], "data: ") {
		t.Fatalf("update = %q, want one event line and one data line", first)
	}
	var page string
	if err := json.Unmarshal([]byte(strings.TrimPrefix(lines[1], "data: ")), &page); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(html.UnescapeString(page), "rm -rf ~") || !strings.Contains(page, a.Call.String()) {
		t.Errorf("the update lacks the call:\n%s", page)
	}
}

// A Write too large for the log (offloaded to the payloads store) is held
// like any other.
func TestLargeCallIsHeld(t *testing.T) {
	f := start(t, nil)
	content := strings.Repeat("a skill line\n", 3000)
	input, _ := json.Marshal(map[string]string{"file_path": "/skills/big/SKILL.md", "content": content})
	a := f.ask(t, "Write", string(input))
	got := f.svc.list("acme", Pending)
	if len(got) != 1 || got[0].ID != a.Call || !strings.Contains(detail(got[0]), "a skill line") {
		t.Fatalf("pending = %+v", got)
	}
}

// The API takes decisions only with a reviewer's token, in the name the
// token belongs to; an ID found in two sessions needs its session.
func TestAPIDecisionsNeedAReviewerToken(t *testing.T) {
	f := start(t, nil)
	a := f.ask(t, "Bash", `{"command":"git push"}`)
	nc := f.js.Conn()
	call := func(req DecideRequest) (string, string) {
		t.Helper()
		data, _ := json.Marshal(req)
		msg, err := nc.Request(SubjectDecide, data, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return msg.Header.Get("Nats-Service-Error-Code"), msg.Header.Get("Nats-Service-Error") + string(msg.Data)
	}
	if code, _ := call(DecideRequest{ID: a.Call, Approve: true}); code != CodeUnauthorized {
		t.Errorf("no token: code %q, want %s", code, CodeUnauthorized)
	}
	if code, _ := call(DecideRequest{ID: a.Call, Approve: true, Token: "not-a-reviewer-token"}); code != CodeUnauthorized {
		t.Errorf("wrong token: code %q, want %s", code, CodeUnauthorized)
	}
	// A raise asked in another session under the same ID makes the ID
	// ambiguous: a decision must say which.
	other := uuid.Must(uuid.NewV7())
	raise := &event.BudgetRaise{Header: event.NewHeader(event.TypeBudgetRaise, "acme", other), Raise: a.Call, User: "mallory", Limits: json.RawMessage(`{"steps":5}`)}
	if err := bus.Record(context.Background(), f.js, raise, "raise"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(f.svc.list("acme", Pending)) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the raise never showed up")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, body := call(DecideRequest{ID: a.Call, Approve: true, Token: bobToken}); code != CodeBadRequest || !strings.Contains(body, "more than one session") {
		t.Errorf("ambiguous ID: %q %s", code, body)
	}
	if code, body := call(DecideRequest{ID: a.Call, Session: other, Approve: false, Token: bobToken, Reason: "no"}); code != "" {
		t.Fatalf("deny the raise: %q %s", code, body)
	}
	got := f.svc.list("acme", Pending)
	if len(got) != 1 || got[0].Session != a.Session {
		t.Fatalf("the held call was decided in the raise's place: %+v", got)
	}
	if decided := f.svc.list("acme", Denied); len(decided) != 1 || decided[0].Reviewer != "bob" || decided[0].Tool != event.BudgetTool {
		t.Errorf("denied = %+v, want the raise, by bob", decided)
	}
}

// An entry written into the bucket by anyone but the service (under wrong
// bus permissions) publishes no decision: the service publishes only what
// it signed.
func TestForgedEntryPublishesNothing(t *testing.T) {
	f := start(t, nil)
	a := &Approval{
		ID: uuid.Must(uuid.NewV7()), Tenant: "acme", Session: uuid.Must(uuid.NewV7()), Tool: "Bash",
		Input: json.RawMessage(`{"command":"git push"}`), Status: Approved, Reviewer: "mallory",
		RequestedAt: time.Now(), DecidedAt: time.Now(),
	}
	a.ArgsHash = event.ArgsHash(a.Tool, a.Input)
	_, other, _ := ed25519.GenerateKey(nil)
	a.Decision = &event.ApprovalDecided{Header: event.NewHeader(event.TypeApprovalDecided, a.Tenant, a.Session), Call: a.ID, ArgsHash: a.ArgsHash, Approved: true, Reviewer: "mallory"}
	a.Decision.Sign(other)
	data, _ := json.Marshal(a)
	if _, err := f.svc.kv.Create(context.Background(), a.key(), data); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // ten sweeps
	msgs, err := bus.ReadAll(context.Background(), f.js, bus.StreamEvents, bus.SessionEvents("acme", a.Session))
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 0 {
		t.Errorf("%d events published for a forged entry", len(msgs))
	}
}
