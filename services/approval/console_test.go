package approval

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
	"corral.dev/pkg/credentialtest"
	"corral.dev/pkg/event"
	"corral.dev/pkg/model"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/sessionindex"
	"corral.dev/pkg/sessionlog"
)

// startConsole is start on a server whose session index is set up, as
// the gateway's package sets it up.
func startConsole(t *testing.T) *fixture {
	t.Helper()
	_, _, js := natstest.Run(t)
	if _, err := js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: bus.BucketSessions, History: 1}); err != nil {
		t.Fatal(err)
	}
	return startOn(t, js, nil)
}

// indexed records a session of user in tenant, and its entry in the index
// as the gateway would keep it.
func (f *fixture) indexed(t *testing.T, tenant, user, title string, status sessionindex.Status) uuid.UUID {
	t.Helper()
	session := uuid.Must(uuid.NewV7())
	req := &event.SessionRequested{Header: event.NewHeader(event.TypeSessionRequested, tenant, session), Request: uuid.New(), User: user, Model: "openai:x", Prompt: title}
	f.record(t, req, "r"+session.String())
	f.index(t, sessionindex.Entry{Tenant: tenant, Session: session, User: user, Status: status, Model: "openai:x", Title: title, Started: req.Time, LastEvent: req.Time})
	return session
}

func (f *fixture) index(t *testing.T, e sessionindex.Entry) {
	t.Helper()
	kv, err := f.js.KeyValue(context.Background(), bus.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(e)
	if _, err := kv.Put(context.Background(), sessionindex.Key(e.Tenant, e.Session), b); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 5*time.Second, func() error {
		if got, ok := f.svc.index.get(e.Tenant, e.Session); !ok || got.Status != e.Status {
			return errors.New("the console never saw the entry")
		}
		return nil
	})
}

// signInWith signs c in with a credential and returns the CSRF token of
// the sessions list.
func (f *fixture) signInWith(t *testing.T, c *http.Client, id, secret string) string {
	t.Helper()
	if code, body := post(t, c, f.srv.URL+"/signin", url.Values{"credential": {id}, "secret": {secret}}, nil); code != http.StatusSeeOther {
		t.Fatalf("sign in with %s: %d %s", id, code, body)
	}
	return csrfOf(t, c, f.srv.URL+"/sessions")
}

func csrfOf(t *testing.T, c *http.Client, u string) string {
	t.Helper()
	_, body := get(t, c, u)
	i := strings.Index(body, `name="csrf" value="`)
	if i < 0 {
		t.Fatalf("no CSRF token on %s:\n%s", u, body)
	}
	rest := body[i+len(`name="csrf" value="`):]
	return rest[:strings.IndexByte(rest, '"')]
}

func TestConsoleShowsEachTheirSessions(t *testing.T) {
	f := startConsole(t)
	adas := f.indexed(t, "acme", "ada", "ada's task", sessionindex.Running)
	bobs := f.indexed(t, "acme", "bob", "bob's task", sessionindex.Completed)
	carls := f.indexed(t, "initech", "carl", "carl's task", sessionindex.Failed)
	ada, adaSecret := credentialtest.Issue(t, f.js, "acme", "ada", credential.RoleUser)
	rita, ritaSecret := credentialtest.Issue(t, f.js, "acme", "rita", credential.RoleReviewer)
	held := f.askIn(t, "acme", "Bash", `{"command":"git push"}`)

	page := func(tenant string, s uuid.UUID) string { return f.srv.URL + sessionPath(tenant, s) }
	type visit struct {
		session uuid.UUID
		tenant  string
		want    int
	}
	for _, tc := range []struct {
		name   string
		signIn func(c *http.Client)
		listed []string
		hidden []string
		visits []visit
	}{
		{
			name:   "a user sees their own sessions",
			signIn: func(c *http.Client) { f.signInWith(t, c, ada.ID, adaSecret) },
			listed: []string{"ada&#39;s task"}, hidden: []string{"bob&#39;s task", "carl&#39;s task"},
			visits: []visit{{adas, "acme", 200}, {bobs, "acme", 404}, {carls, "initech", 404}, {carls, "acme", 404}},
		},
		{
			name:   "a reviewer sees their tenant's",
			signIn: func(c *http.Client) { f.signInWith(t, c, rita.ID, ritaSecret) },
			listed: []string{"ada&#39;s task", "bob&#39;s task"}, hidden: []string{"carl&#39;s task"},
			visits: []visit{{adas, "acme", 200}, {bobs, "acme", 200}, {carls, "initech", 404}},
		},
		{
			name:   "an operator sees every tenant's",
			signIn: func(c *http.Client) { f.signIn(t, c, aliceToken) },
			listed: []string{"ada&#39;s task", "bob&#39;s task", "carl&#39;s task"},
			visits: []visit{{adas, "acme", 200}, {carls, "initech", 200}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := f.client(t)
			tc.signIn(c)
			code, list := get(t, c, f.srv.URL+"/sessions")
			if code != http.StatusOK {
				t.Fatalf("GET /sessions: %d", code)
			}
			for _, s := range tc.listed {
				if !strings.Contains(list, s) {
					t.Errorf("the list does not show %s:\n%s", s, list)
				}
			}
			for _, s := range tc.hidden {
				if strings.Contains(list, s) {
					t.Errorf("the list shows %s:\n%s", s, list)
				}
			}
			for _, v := range tc.visits {
				// The session's page, and its workspace's.
				for _, u := range []string{"", "/workspace", "/workspace/file?path=app.txt"} {
					if code, _ := get(t, c, page(v.tenant, v.session)+u); code != v.want {
						t.Errorf("GET the page %s of %s/%s: %d, want %d", u, v.tenant, v.session, code, v.want)
					}
				}
			}
		})
	}

	// A user decides nothing, and has no approvals page.
	c := f.client(t)
	csrf := f.signInWith(t, c, ada.ID, adaSecret)
	resp, err := c.Get(f.srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/sessions" {
		t.Errorf("GET / as a user: %d to %q, want a redirect to /sessions", resp.StatusCode, resp.Header.Get("Location"))
	}
	form := url.Values{"id": {held.Call.String()}, "session": {held.Session.String()}, "tenant": {"acme"}, "verdict": {"approve"}, "csrf": {csrf}}
	if code, _ := post(t, c, f.srv.URL+"/decide", form, nil); code != http.StatusForbidden {
		t.Errorf("POST /decide as a user: %d, want 403", code)
	}
	if ds := decisions(t, f.js, "acme", held.Session); len(ds) != 0 {
		t.Errorf("a user decided: %+v", ds)
	}
	if code, _ := get(t, c, f.srv.URL+"/live"); code != http.StatusForbidden {
		t.Errorf("GET /live as a user: %d, want 403", code)
	}
}

func TestConsoleFilters(t *testing.T) {
	f := startConsole(t)
	f.indexed(t, "acme", "ada", "running one", sessionindex.Running)
	f.indexed(t, "acme", "bob", "done one", sessionindex.Completed)
	c := f.client(t)
	f.signIn(t, c, aliceToken)
	for _, tc := range []struct {
		query      string
		code       int
		want, miss string
	}{
		{"status=completed", 200, "done one", "running one"},
		{"user=ada", 200, "running one", "done one"},
		{"status=idle", 400, "want one of", ""},
		{"owner=ada", 400, "unknown filter", ""},
	} {
		code, body := get(t, c, f.srv.URL+"/sessions?"+tc.query)
		if code != tc.code || !strings.Contains(body, tc.want) || tc.miss != "" && strings.Contains(body, tc.miss) {
			t.Errorf("GET /sessions?%s: %d, want %d showing %q and not %q:\n%s", tc.query, code, tc.code, tc.want, tc.miss, body)
		}
	}
}

// A session's page shows its timeline: the prompt, the model's text
// escaped, each call with its input, the diff of an Edit, a long output
// folded, a held call with the decision's form, and its decision.
func TestConsoleTimeline(t *testing.T) {
	f := startConsole(t)
	session := f.indexed(t, "acme", "ada", "fix the <b>bug</b>", sessionindex.Running)
	edit, bash := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	resp := &event.ModelResponded{
		Header: event.NewHeader(event.TypeModelResponded, "acme", session), Turn: 1, Model: "openai:x",
		Content: []model.Block{
			{Type: model.TextBlock, Text: "I will <script>alert(1)</script> fix it"},
			{Type: model.ToolUseBlock, ID: "t1", Name: "Edit", Input: json.RawMessage(`{"file_path":"/workspace/a.go","old_string":"x := 1","new_string":"x := 2"}`)},
			{Type: model.ToolUseBlock, ID: "t2", Name: "Bash", Input: json.RawMessage(`{"command":"go test ./..."}`)},
		},
		Calls: []event.Call{{ID: edit, ToolUseID: "t1", Name: "Edit"}, {ID: bash, ToolUseID: "t2", Name: "Bash"}},
		Usage: model.Usage{InputTokens: 1000, OutputTokens: 100},
	}
	f.record(t, resp, session.String()+":1")
	f.record(t, event.NewToolDispatched(resp, resp.Calls[1], bus.ServiceSandbox), bash.String()+":dispatched")
	done := &event.ToolCompleted{Header: event.NewHeader(event.TypeToolCompleted, "acme", session), Call: bash, Name: "Bash", Output: strings.Repeat("ok line\n", 40), Service: "sandbox"}
	if err := sessionlog.New(f.js, sessionlog.Options{As: sessionlog.Sandbox}).Record(context.Background(), done, bash.String()+":done"); err != nil {
		t.Fatal(err)
	}
	ask := &event.ApprovalRequested{
		Header: event.NewHeader(event.TypeApprovalRequested, "acme", session), Call: edit, Turn: 1, User: "ada", Tool: "Edit",
		Input: resp.Input(resp.Calls[0]), ArgsHash: event.ArgsHash("Edit", resp.Input(resp.Calls[0])), Rule: "edits", Reason: "edits code",
	}
	f.record(t, ask, edit.String()+":approval")
	natstest.WaitFor(t, 10*time.Second, func() error {
		if !f.has(edit) {
			return errors.New("the approval never showed up")
		}
		return nil
	})

	c := f.client(t)
	f.signIn(t, c, aliceToken)
	code, body := get(t, c, f.srv.URL+sessionPath("acme", session))
	if code != http.StatusOK {
		t.Fatalf("GET the session's page: %d", code)
	}
	for _, want := range []string{
		"fix the &lt;b&gt;bug&lt;/b&gt;",
		"I will &lt;script&gt;alert(1)&lt;/script&gt; fix it",
		`<span class="del">-x := 1</span>`, `<span class="add">&#43;x := 2</span>`,
		"go test ./...",
		"<details><summary>Output (41 lines)</summary>",
		`id="held-` + edit.String() + `"`, `name="back" value="` + sessionPath("acme", session) + `"`,
		`action="` + sessionPath("acme", session) + `/stop"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the page does not show %s:\n%s", want, body)
		}
	}
	if strings.Contains(body, "<script>alert(1)") || strings.Contains(body, "<b>bug") {
		t.Errorf("the page shows what the model wrote unescaped:\n%s", body)
	}

	// Approved in place: back on the session's page, decided.
	csrf := csrfOf(t, c, f.srv.URL+sessionPath("acme", session))
	hc := *c
	code, _ = post(t, &hc, f.srv.URL+"/decide", url.Values{
		"id": {edit.String()}, "session": {session.String()}, "tenant": {"acme"}, "verdict": {"approve"}, "csrf": {csrf},
		"back": {sessionPath("acme", session)},
	}, nil)
	if code != http.StatusSeeOther {
		t.Fatalf("approve from the session's page: %d", code)
	}
	natstest.WaitFor(t, 5*time.Second, func() error {
		_, body := get(t, c, f.srv.URL+sessionPath("acme", session))
		if !strings.Contains(body, "approved by alice") || strings.Contains(body, `data-id="`+edit.String()+`"`) {
			return errors.New("the page does not show the call approved")
		}
		return nil
	})

	// A user of the session sees it, but no form to decide.
	ada, secret := credentialtest.Issue(t, f.js, "acme", "ada", credential.RoleUser)
	other := f.askIn(t, "acme", "Bash", `{"command":"rm -rf /"}`)
	f.index(t, sessionindex.Entry{Tenant: "acme", Session: other.Session, User: "ada", Status: sessionindex.Waiting})
	uc := f.client(t)
	f.signInWith(t, uc, ada.ID, secret)
	_, body = get(t, uc, f.srv.URL+sessionPath("acme", other.Session))
	if !strings.Contains(body, "Waiting for a reviewer") || strings.Contains(body, `action="/decide"`) {
		t.Errorf("a user's page of a held call:\n%s", body)
	}
}

func TestConsoleStopNeedsCSRFAndVisibility(t *testing.T) {
	f := startConsole(t)
	session := f.indexed(t, "acme", "ada", "long job", sessionindex.Running)
	bob, bobSecret := credentialtest.Issue(t, f.js, "acme", "bob", credential.RoleUser)
	stop := f.srv.URL + sessionPath("acme", session) + "/stop"

	c := f.client(t)
	csrf := f.signIn(t, c, aliceToken)
	if code, _ := post(t, c, stop, url.Values{}, nil); code != http.StatusForbidden {
		t.Errorf("a stop without its CSRF token: %d, want 403", code)
	}
	if code, _ := post(t, c, stop, url.Values{"csrf": {"forged"}}, nil); code != http.StatusForbidden {
		t.Errorf("a stop with a forged CSRF token: %d, want 403", code)
	}
	bc := f.client(t)
	bcsrf := f.signInWith(t, bc, bob.ID, bobSecret)
	if code, _ := post(t, bc, stop, url.Values{"csrf": {bcsrf}}, nil); code != http.StatusNotFound {
		t.Errorf("another user stops ada's session: %d, want 404", code)
	}
	if got := stops(t, f.js); len(got) != 0 {
		t.Fatalf("stops were sent: %+v", got)
	}
	if code, _ := post(t, c, stop, url.Values{"csrf": {csrf}, "reason": {"runaway"}}, nil); code != http.StatusSeeOther {
		t.Fatalf("a stop: %d", code)
	}
	got := stops(t, f.js)
	if len(got) != 1 {
		t.Fatalf("%d stops sent, want 1", len(got))
	}
	want := bus.ConsoleStopSubject("acme", session)
	if got[0].subject != want || got[0].stop.By != "alice" || got[0].stop.Reason != "runaway" || got[0].stop.Session != session {
		t.Errorf("the stop sent: %s %+v, want one on %s by alice", got[0].subject, got[0].stop, want)
	}
}

type sentStop struct {
	subject string
	stop    event.SessionStopped
}

// stops returns the stops in the requests stream.
func stops(t *testing.T, js jetstream.JetStream) []sentStop {
	t.Helper()
	ctx := context.Background()
	st, err := js.Stream(ctx, bus.StreamRequests)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []sentStop
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			continue // deleted
		}
		var s event.SessionStopped
		if json.Unmarshal(m.Data, &s) == nil && s.Type == event.TypeSessionStopped {
			out = append(out, sentStop{m.Subject, s})
		}
	}
	return out
}

// The session's stream sends the events recorded after the page's, and
// the model's text as it comes.
func TestConsoleTimelineIsLive(t *testing.T) {
	f := startConsole(t)
	session := f.indexed(t, "acme", "ada", "watch me", sessionindex.Running)
	c := f.client(t)
	f.signIn(t, c, aliceToken)
	entries, _, err := f.svc.console.ReadAll(context.Background(), "acme", session)
	if err != nil {
		t.Fatal(err)
	}
	next := stream(t, c, fmt.Sprintf("%s%s/live?after=%d", f.srv.URL, sessionPath("acme", session), entries[len(entries)-1].Seq))

	f.record(t, &event.ModelResponded{Header: event.NewHeader(event.TypeModelResponded, "acme", session), Turn: 1, Model: "openai:x",
		Content: []model.Block{{Type: model.TextBlock, Text: "first <turn>"}}}, session.String()+":1")
	if e := next("the first turn"); !strings.HasPrefix(e, "steps ") || !strings.Contains(e, `first \u0026lt;turn\u0026gt;`) {
		t.Errorf("the first event sent: %s", e)
	}
	if e := next("the live text cleared"); e != `live {"op":"clear"}` {
		t.Errorf("after a turn: %s, want the live text cleared", e)
	}
	piece, _ := json.Marshal(event.Live{Kind: event.LiveText, Turn: 2, Attempt: 1, Seq: 1, Text: "thinking <aloud>"})
	if err := f.js.Conn().Publish(bus.LiveSubject("acme", session), piece); err != nil {
		t.Fatal(err)
	}
	if e := next("the live text"); e != `live {"op":"text","text":"thinking \u003caloud\u003e"}` {
		t.Errorf("a live piece sent as %s", e)
	}
}

// stream opens the server-sent events at u and returns a function that
// returns the next, as "<event> <data>".
func stream(t *testing.T, c *http.Client, u string) func(what string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", u, resp.Status)
	}
	events := make(chan string, 16)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		var name string
		for sc.Scan() {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "event: "); ok {
				name = v
			}
			if v, ok := strings.CutPrefix(line, "data: "); ok {
				events <- name + " " + v
			}
		}
	}()
	return func(what string) string {
		t.Helper()
		select {
		case e, ok := <-events:
			if !ok {
				t.Fatalf("the stream ended before %s", what)
			}
			return e
		case <-ctx.Done():
			t.Fatalf("no %s", what)
		}
		return ""
	}
}

// The list's stream sends the rows again whenever the index changes.
func TestConsoleListIsLive(t *testing.T) {
	f := startConsole(t)
	c := f.client(t)
	f.signIn(t, c, aliceToken)
	next := stream(t, c, f.srv.URL+"/sessions/live?status=running")
	if e := next("the list"); !strings.Contains(e, "No sessions match the filter") {
		t.Errorf("the first list: %s", e)
	}
	f.indexed(t, "acme", "ada", "a new one", sessionindex.Running)
	e := next("the new session")
	for !strings.Contains(e, "a new one") {
		e = next("the new session")
	}
}
