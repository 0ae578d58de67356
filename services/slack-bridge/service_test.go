package slackbridge_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"corral.dev/pkg/approvalapi"
	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/natstest"
	slackbridge "corral.dev/services/slack-bridge"
	"corral.dev/services/slack-bridge/slacktest"
)

func TestEveryRequestMustBeSigned(t *testing.T) {
	f := newFixture(t, nil)
	ts := f.slack.Post("C1", "", "U1", "<@U0BOT> hi")
	event, _ := json.Marshal(f.app.Callback("Ev1", f.app.AppMention("C1", "U1", "hi", ts, "")))
	command := []byte("team_id=T0TEAM&channel_id=C1&user_id=U1&command=%2Fcorral&text=hi")
	click := []byte("payload=%7B%22type%22%3A%22block_actions%22%7D")
	bodies := map[string][]byte{"/slack/events": event, "/slack/commands": command, "/slack/interactivity": click}
	send := func(path string, sign func(body []byte) (stamp, sig string)) int {
		t.Helper()
		body := bodies[path]
		req, _ := http.NewRequest(http.MethodPost, f.app.URL+path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if sign != nil {
			stamp, sig := sign(body)
			req.Header.Set("X-Slack-Request-Timestamp", stamp)
			req.Header.Set("X-Slack-Signature", sig)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	at := func(d time.Duration, key string) func([]byte) (string, string) {
		return func(body []byte) (string, string) {
			ts := time.Now().Add(d).Unix()
			return fmt.Sprint(ts), slacktest.Sign(key, ts, body)
		}
	}
	cases := []struct {
		name string
		sign func([]byte) (string, string)
	}{
		{"unsigned", nil},
		{"wrong secret", at(0, "not-the-secret")},
		{"signature of another body", func([]byte) (string, string) { return at(0, secret)([]byte("other")) }},
		{"malformed signature", func([]byte) (string, string) { return fmt.Sprint(time.Now().Unix()), "v0=zz" }},
		{"stale timestamp", at(-6*time.Minute, secret)},
		{"future timestamp", at(6*time.Minute, secret)},
		{"signed with a timestamp it does not send", func(body []byte) (string, string) {
			ts := time.Now().Unix()
			return fmt.Sprint(ts - 1), slacktest.Sign(secret, ts, body)
		}},
	}
	for _, tc := range cases {
		for path := range bodies {
			if got := send(path, tc.sign); got != http.StatusUnauthorized {
				t.Errorf("%s to %s: status %d, want 401", tc.name, path, got)
			}
		}
	}
	if reqs := f.requests(t); len(reqs) != 0 {
		t.Errorf("refused requests published %d requests", len(reqs))
	}
	if calls := f.slack.Calls(""); len(calls) != 0 {
		t.Errorf("refused requests made Slack calls: %+v", calls)
	}
	// The same event, signed, is taken.
	if got := send("/slack/events", at(-4*time.Minute, secret)); got != http.StatusOK {
		t.Fatalf("signed event: status %d", got)
	}
	if reqs := f.requests(t); len(reqs) != 1 {
		t.Fatalf("signed event published %d requests, want 1", len(reqs))
	}
}

func TestURLVerification(t *testing.T) {
	f := newFixture(t, nil)
	r, err := f.app.Send("/slack/events", "application/json", slacktest.URLVerification("3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"), time.Now())
	mustOK(t, r, err)
	if r.Body != "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P" {
		t.Errorf("challenge answered with %q", r.Body)
	}
}

func TestMentionsAndDirectMessagesMakeRequests(t *testing.T) {
	f := newFixture(t, map[string]string{"CORRAL_SLACK_MODEL": "openai:gpt-test"})
	root := f.slack.Post("C1", "", "U1", "<@U0BOT> list the files")
	ok(t)(f.app.Event("Ev1", f.app.AppMention("C1", "U1", "list the files", root, "")))
	// Slack retries an event it thinks was not taken; the retry starts
	// nothing more.
	ok(t)(f.app.Event("Ev1", f.app.AppMention("C1", "U1", "list the files", root, ""), "X-Slack-Retry-Num", "1", "X-Slack-Retry-Reason", "http_timeout"))
	// A follow-up in the thread is the same session.
	reply := f.slack.Post("C1", root, "U2", "<@U0BOT> and their sizes")
	ok(t)(f.app.Event("Ev2", f.app.AppMention("C1", "U2", "and their sizes", reply, root)))
	// A direct message starts its own thread, and session.
	dm := f.slack.Post("D1", "", "U1", "hello")
	ok(t)(f.app.Event("Ev3", slacktest.DirectMessage("D1", "U1", "hello", dm, "")))
	// Ignored: bots' messages, edits, messages in channels (mentions come
	// as app_mention), and a mention by the app itself.
	botMsg := slacktest.DirectMessage("D1", "", "I am a bot", f.slack.Post("D1", "", "", "I am a bot"), "")
	botMsg["bot_id"], botMsg["subtype"] = "B0BOT", "bot_message"
	ok(t)(f.app.Event("Ev4", botMsg))
	edit := slacktest.DirectMessage("D1", "U1", "hello again", dm, "")
	edit["subtype"] = "message_changed"
	ok(t)(f.app.Event("Ev5", edit))
	channelMsg := slacktest.DirectMessage("C1", "U1", "chatter", f.slack.Post("C1", "", "U1", "chatter"), "")
	channelMsg["channel_type"] = "channel"
	ok(t)(f.app.Event("Ev6", channelMsg))
	ok(t)(f.app.Event("Ev7", f.app.AppMention("C1", bot, "myself", f.slack.Post("C1", "", bot, "myself"), "")))

	reqs := f.requests(t)
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3: %+v", len(reqs), reqs)
	}
	thread := slackbridge.SessionID(team, "C1", root)
	want := []struct {
		session uuid.UUID
		user    string
		prompt  string
	}{
		{thread, "slack:U1", "list the files"},
		// The thread is U1's session: U2's follow-up is a request of
		// U1's, saying who wrote it.
		{thread, "slack:U1", "(<@U2> writes in the thread:) and their sizes"},
		{slackbridge.SessionID(team, "D1", dm), "slack:U1", "hello"},
	}
	for i, w := range want {
		r := reqs[i]
		if r.Session != w.session || r.User != w.user || r.Prompt != w.prompt || r.Tenant != "acme" || r.Model != "openai:gpt-test" {
			t.Errorf("request %d = %+v, want session %s user %s prompt %q tenant acme", i, r, w.session, w.user, w.prompt)
		}
		if r.ID == uuid.Nil || r.ID == r.Session {
			t.Errorf("request %d has ID %s", i, r.ID)
		}
	}
	if reqs[0].ID != slackbridge.RequestID(team, "C1", root) {
		t.Errorf("the first request's ID is not derived from its message")
	}
}

// harnessAnswers plays the harness for the request of session: it records
// the request, n tool calls and the answer.
func (f *fixture) harnessAnswers(t *testing.T, req event.Request, calls int, answer string) {
	t.Helper()
	f.record(t, &event.SessionRequested{Header: header(event.TypeSessionRequested, req.Tenant, req.Session), Request: req.ID, User: req.User, Model: "openai:gpt-test", Prompt: req.Prompt})
	for i := range calls {
		f.record(t, &event.ToolDispatched{Header: header(event.TypeToolDispatched, req.Tenant, req.Session), Call: uuid.Must(uuid.NewV7()), Turn: i + 1, Name: "Bash", Summary: fmt.Sprintf("ls %d", i)})
	}
	f.record(t, &event.SessionCompleted{Header: header(event.TypeSessionCompleted, req.Tenant, req.Session), Answer: answer, Turns: calls + 1})
}

// approvalMessage waits for the app's message with buttons in a thread,
// and returns it.
func (f *fixture) approvalMessage(t *testing.T, channel, ts string) slacktest.Message {
	t.Helper()
	var msg slacktest.Message
	natstest.WaitFor(t, 20*time.Second, func() error {
		for _, m := range f.replies(channel, ts) {
			if m.HasButtons() {
				msg = m
				return nil
			}
		}
		return fmt.Errorf("no approval message with buttons in %q", slacktest.Texts(f.replies(channel, ts)))
	})
	return msg
}

// replies returns the app's messages in a thread after its first.
func (f *fixture) replies(channel, ts string) []slacktest.Message {
	var out []slacktest.Message
	for _, m := range f.slack.Thread(channel, ts)[1:] {
		if m.User == "" {
			out = append(out, m)
		}
	}
	return out
}

func TestAnswerLandsInTheThreadOnceAcrossRestarts(t *testing.T) {
	f := newFixture(t, nil)
	root := f.slack.Post("C1", "", "U1", "<@U0BOT> count <things> & more")
	ok(t)(f.app.Event("Ev1", f.app.AppMention("C1", "U1", "count", root, "")))
	req := f.requests(t)[0]
	// Slack is busy at first: the bridge waits as it is told.
	f.slack.RateLimitNext(1, "1")
	f.harnessAnswers(t, req, 2, "There are <!channel> 2 things & 1 more.")
	natstest.WaitFor(t, 20*time.Second, func() error {
		got := slacktest.Texts(f.replies("C1", root))
		if len(got) != 2 || !strings.HasPrefix(got[0], "✅ Done after 2 tool calls") {
			return fmt.Errorf("thread: %q", got)
		}
		return nil
	})
	got := slacktest.Texts(f.replies("C1", root))
	if want := "There are &lt;!channel&gt; 2 things &amp; 1 more."; got[1] != want {
		t.Errorf("answer %q, want %q (escaped: no ping)", got[1], want)
	}
	posts := f.slack.Calls("chat.postMessage")
	if posts[0].Status != 429 || !strings.HasPrefix(posts[0].ContentType, "application/json") {
		t.Errorf("first post: status %d, content type %q; want 429 and JSON", posts[0].Status, posts[0].ContentType)
	}
	if posts[1].Args["thread_ts"] != root || posts[1].Args["channel"] != "C1" {
		t.Errorf("posted to %v/%v, want the thread C1/%s", posts[1].Args["channel"], posts[1].Args["thread_ts"], root)
	}

	// A restart posts nothing again.
	f.stop()
	f.start(t)
	// A follow-up in the thread: the same session goes on, and its answer
	// too lands in the thread.
	reply := f.slack.Post("C1", root, "U1", "<@U0BOT> again")
	ok(t)(f.app.Event("Ev2", f.app.AppMention("C1", "U1", "again", reply, root)))
	reqs := f.requests(t)
	if len(reqs) != 2 || reqs[1].Session != req.Session {
		t.Fatalf("requests %+v: want a second one for session %s", reqs, req.Session)
	}
	f.harnessAnswers(t, reqs[1], 0, "Again: 2.")
	natstest.WaitFor(t, 20*time.Second, func() error {
		got := slacktest.Texts(f.replies("C1", root))
		if len(got) != 4 || got[3] != "Again: 2." {
			return fmt.Errorf("thread: %q", got)
		}
		return nil
	})
	if got := slacktest.Texts(f.replies("C1", root)); got[2] != "✅ Done after 0 tool calls." {
		t.Errorf("thread %q", got)
	}
}

// A bridge that died between Slack's answer to a post and noting it finds
// the message in the thread instead of posting it again.
func TestPostInterruptedByACrashIsNotRepeated(t *testing.T) {
	f := newFixture(t, nil)
	root := f.slack.Post("C1", "", "U1", "<@U0BOT> go")
	ok(t)(f.app.Event("Ev1", f.app.AppMention("C1", "U1", "go", root, "")))
	req := f.requests(t)[0]
	f.harnessAnswers(t, req, 0, "Gone.")
	natstest.WaitFor(t, 20*time.Second, func() error {
		if got := slacktest.Texts(f.replies("C1", root)); len(got) != 2 {
			return fmt.Errorf("thread: %q", got)
		}
		return nil
	})
	f.stop()
	// Put the thread back to just before the answer was noted as posted.
	kv, err := f.js.KeyValue(context.Background(), slackbridge.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	key := "acme.thread." + req.Session.String()
	e, err := kv.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	var th map[string]any
	if err := json.Unmarshal(e.Value(), &th); err != nil {
		t.Fatal(err)
	}
	seq := uint64(th["seq"].(float64))
	th["seq"], th["posting"], th["busy"] = seq-1, seq, true
	b, _ := json.Marshal(th)
	if _, err := kv.Put(context.Background(), key, b); err != nil {
		t.Fatal(err)
	}
	f.start(t)
	natstest.WaitFor(t, 20*time.Second, func() error {
		e, err := kv.Get(context.Background(), key)
		if err != nil {
			return err
		}
		if !strings.Contains(string(e.Value()), fmt.Sprintf(`"seq":%d`, seq)) {
			return fmt.Errorf("thread not caught up: %s", e.Value())
		}
		return nil
	})
	if got := slacktest.Texts(f.replies("C1", root)); len(got) != 2 || got[1] != "Gone." {
		t.Errorf("thread after the restart: %q, want the answer once", got)
	}
	if n := len(f.slack.Calls("conversations.replies")); n != 1 {
		t.Errorf("%d conversations.replies calls, want 1", n)
	}
}

func TestApprovalShownAndClickByUnmappedUserRefused(t *testing.T) {
	f := newFixture(t, map[string]string{"CORRAL_SLACK_REVIEWERS": "U0GRACE:grace"})
	decisions, err := f.js.Conn().SubscribeSync(bus.ApprovalAPI("*", "*", bus.OpDecide))
	if err != nil {
		t.Fatal(err)
	}
	root := f.slack.Post("C1", "", "U1", "<@U0BOT> push it")
	ok(t)(f.app.Event("Ev1", f.app.AppMention("C1", "U1", "push it", root, "")))
	req := f.requests(t)[0]
	f.record(t, &event.SessionRequested{Header: header(event.TypeSessionRequested, req.Tenant, req.Session), Request: req.ID, User: req.User, Prompt: req.Prompt})
	call := uuid.Must(uuid.NewV7())
	input := json.RawMessage(`{"command":"git push origin main"}`)
	f.record(t, &event.ApprovalRequested{Header: header(event.TypeApprovalRequested, req.Tenant, req.Session), Call: call, User: req.User,
		Tool: "Bash", Input: input, ArgsHash: event.ArgsHash("Bash", input), Rule: "risky-shell", Reason: "the command pushes code"})
	ask := f.approvalMessage(t, "C1", root)
	for _, want := range []string{"git push origin main", "risky-shell", slackbridge.ActionApprove, fmt.Sprintf("%s/%s", req.Session, call)} {
		if !strings.Contains(string(ask.Blocks), want) {
			t.Errorf("approval blocks lack %q: %s", want, ask.Blocks)
		}
	}
	ok(t)(f.app.Click("C1", "U0MALLORY", ask.TS, root, slackbridge.ActionApprove, fmt.Sprintf("%s/%s", req.Session, call)))
	natstest.WaitFor(t, 10*time.Second, func() error {
		if e := f.slack.Ephemerals("U0MALLORY"); len(e) != 1 || !strings.Contains(e[0].Text, "not one of Corral's reviewers") {
			return fmt.Errorf("ephemerals to the clicker: %+v", e)
		}
		return nil
	})
	if m, err := decisions.NextMsg(100 * time.Millisecond); err == nil {
		t.Errorf("an unmapped user's click asked for a decision: %s", m.Data)
	}
	if m, _ := f.slack.Message("C1", ask.TS); !m.HasButtons() {
		t.Errorf("the approval lost its buttons: %s", m.Blocks)
	}
}

// A click can come before the approval service has read the approval's
// request from the log (the button goes up as soon as the bridge reads
// it): the bridge asks again until the service knows it, and the message
// then shows the denial.
func TestClickBeforeTheApprovalServiceKnowsIt(t *testing.T) {
	f := newFixture(t, map[string]string{"CORRAL_SLACK_REVIEWERS": "U0GRACE:grace"})
	root := f.slack.Post("C1", "", "U1", "<@U0BOT> push it")
	ok(t)(f.app.Event("Ev1", f.app.AppMention("C1", "U1", "push it", root, "")))
	req := f.requests(t)[0]
	f.record(t, &event.SessionRequested{Header: header(event.TypeSessionRequested, req.Tenant, req.Session), Request: req.ID, User: req.User, Prompt: req.Prompt})
	call := uuid.Must(uuid.NewV7())
	input := json.RawMessage(`{"command":"git push origin main"}`)
	f.record(t, &event.ApprovalRequested{Header: header(event.TypeApprovalRequested, req.Tenant, req.Session), Call: call, User: req.User,
		Tool: "Bash", Input: input, ArgsHash: event.ArgsHash("Bash", input), Rule: "risky-shell", Reason: "the command pushes code"})

	// An approval service that learns of the approval at its third ask.
	asked := make(chan approvalapi.DecideRequest, 10)
	subjects := make(chan string, 10)
	sub, err := f.js.Conn().Subscribe(bus.ApprovalAPI("*", "*", bus.OpDecide), func(m *nats.Msg) {
		subjects <- m.Subject
		var dr approvalapi.DecideRequest
		_ = json.Unmarshal(m.Data, &dr)
		asked <- dr
		reply := nats.NewMsg(m.Reply)
		if len(asked) < 3 {
			reply.Header.Set("Nats-Service-Error", fmt.Sprintf("no approval %s", dr.ID))
			reply.Header.Set("Nats-Service-Error-Code", approvalapi.CodeNotFound)
		} else {
			status := approvalapi.Approved
			if !dr.Approve {
				status = approvalapi.Denied
			}
			reply.Data, _ = json.Marshal(approvalapi.Response{Approvals: []*approvalapi.Approval{{ID: dr.ID, Session: dr.Session, Tool: "Bash", Input: input,
				Rule: "risky-shell", Status: status, Reviewer: reviewer, Reason: dr.Reason}}})
		}
		_ = m.RespondMsg(reply)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	ask := f.approvalMessage(t, "C1", root)
	ok(t)(f.app.Click("C1", "U0GRACE", ask.TS, root, slackbridge.ActionDeny, fmt.Sprintf("%s/%s", req.Session, call)))
	natstest.WaitFor(t, 10*time.Second, func() error {
		if m, _ := f.slack.Message("C1", ask.TS); m.HasButtons() || !strings.Contains(string(m.Blocks), "Denied") || !strings.Contains(string(m.Blocks), "grace") {
			return fmt.Errorf("the approval does not show the denial: %s", m.Blocks)
		}
		return nil
	})
	if len(asked) != 3 {
		t.Errorf("the approval service was asked %d times, want 3", len(asked))
	}
	dr := <-asked
	if dr.ID != call || dr.Session != req.Session || dr.Approve || !strings.Contains(dr.Reason, "grace") {
		t.Errorf("decide request %+v: want a denial of call %s, naming grace, who clicked", dr, call)
	}
	if got, want := <-subjects, approvalapi.Subject(req.Tenant, reviewer, bus.OpDecide); got != want {
		t.Errorf("decide request on %s, want %s (as the reviewer of the tenant's credential, in the session's tenant)", got, want)
	}
	if e := f.slack.Ephemerals("U0GRACE"); len(e) != 0 {
		t.Errorf("the reviewer was told %q", slacktest.Texts(e))
	}
}

func TestSlashCommandStartsAThread(t *testing.T) {
	f := newFixture(t, nil)
	r, err := f.app.Command("C1", "U1", "/corral", "summarise <this>")
	mustOK(t, r, err)
	var answer struct{ ResponseType, Text string }
	if err := json.Unmarshal([]byte(r.Body), &struct {
		ResponseType *string `json:"response_type"`
		Text         *string `json:"text"`
	}{&answer.ResponseType, &answer.Text}); err != nil {
		t.Fatal(err)
	}
	if answer.ResponseType != "ephemeral" || !strings.Contains(answer.Text, "thread") {
		t.Errorf("slash command answered %s", r.Body)
	}
	posts := f.slack.Calls("chat.postMessage")
	if len(posts) != 1 || posts[0].Args["thread_ts"] != nil {
		t.Fatalf("posts %+v: want one thread starter", posts)
	}
	starter := posts[0]
	reqs := f.requests(t)
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	var ts string
	for _, m := range f.slack.Messages("C1") {
		if m.User == "" {
			ts = m.TS
		}
	}
	if reqs[0].Session != slackbridge.SessionID(team, "C1", ts) || reqs[0].Prompt != "summarise <this>" {
		t.Errorf("request %+v: want the session of the thread %s", reqs[0], ts)
	}
	if !strings.Contains(fmt.Sprint(starter.Args["text"]), "summarise &lt;this&gt;") {
		t.Errorf("thread starter %v", starter.Args["text"])
	}
	f.harnessAnswers(t, reqs[0], 0, "Summary.")
	natstest.WaitFor(t, 20*time.Second, func() error {
		if got := slacktest.Texts(f.replies("C1", ts)); len(got) != 2 || got[1] != "Summary." {
			return fmt.Errorf("thread: %q", got)
		}
		return nil
	})

	// A channel the app is not in: the user is told, nothing starts.
	f.slack.NotInChannel("C2")
	r, err = f.app.Command("C2", "U1", "/corral", "hi")
	mustOK(t, r, err)
	if !strings.Contains(r.Body, "not_in_channel") {
		t.Errorf("not in channel: answered %s", r.Body)
	}
	if n := len(f.requests(t)); n != 1 {
		t.Errorf("%d requests, want still 1", n)
	}
}

// A captured slash command sent again, within the five minutes its
// signature is good for and after the bridge restarts, starts nothing more;
// the same words sent as a new command do.
func TestSlashCommandReplayed(t *testing.T) {
	f := newFixture(t, nil)
	captured := f.app.CommandRequest("C1", "U1", "/corral", "delete the backups")
	r, err := f.app.Post(captured)
	mustOK(t, r, err)
	if !strings.Contains(r.Body, "On it") {
		t.Fatalf("first command answered %s", r.Body)
	}
	replay := func() {
		t.Helper()
		r, err := f.app.Post(captured)
		mustOK(t, r, err)
		if !strings.Contains(r.Body, "taken already") {
			t.Errorf("replay answered %s", r.Body)
		}
		if n := len(f.requests(t)); n != 1 {
			t.Errorf("%d requests after a replay, want 1", n)
		}
		if n := len(f.slack.Calls("chat.postMessage")); n != 1 {
			t.Errorf("%d threads started after a replay, want 1", n)
		}
	}
	replay()
	f.stop()
	f.start(t)
	replay()

	r, err = f.app.Command("C1", "U1", "/corral", "delete the backups")
	mustOK(t, r, err)
	if n := len(f.requests(t)); n != 2 {
		t.Errorf("%d requests after a second command, want 2", n)
	}
}
