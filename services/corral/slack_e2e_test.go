package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"corral.dev/pkg/credential"
	"corral.dev/pkg/event"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
	slackbridge "corral.dev/services/slack-bridge"
	"corral.dev/services/slack-bridge/slacktest"
)

const (
	slackSecret   = "8f742231b10e8888abcd99yyyzzz85a5"
	slackBotToken = "xoxb-17653672481-19874698323-pdFZKVeTuE8sk7oOcBrzbqgy"
	slackTeam     = "T0TEAM"
)

// prompts returns what people asked in a conversation, oldest first.
func prompts(c modeltest.Conversation) []string {
	var out []string
	for _, m := range c.Messages {
		if m.Role == "user" && m.Text != "" && len(m.Results) == 0 {
			out = append(out, m.Text)
		}
	}
	return out
}

// buttonValue returns the value of the first button of a message.
func buttonValue(t *testing.T, m slacktest.Message) string {
	t.Helper()
	var blocks []struct {
		Type     string `json:"type"`
		Elements []struct {
			Value string `json:"value"`
		} `json:"elements"`
	}
	if err := json.Unmarshal(m.Blocks, &blocks); err != nil {
		t.Fatal(err)
	}
	for _, b := range blocks {
		if b.Type == "actions" && len(b.Elements) > 0 {
			return b.Elements[0].Value
		}
	}
	t.Fatalf("no button in %s", m.Blocks)
	return ""
}

// appMessages returns the app's messages in a thread, after its first.
func appMessages(fake *slacktest.Server, channel, ts string) []slacktest.Message {
	var out []slacktest.Message
	for _, m := range fake.Thread(channel, ts)[1:] {
		if m.User == "" {
			out = append(out, m)
		}
	}
	return out
}

// A Slack thread is a session: a mention starts it, a held call is
// approved with a button (an unmapped user's click is refused), the answer
// lands in the thread, Slack's retry starts nothing twice, and a follow-up
// in the thread goes on with the same session.
func TestSlackThreadIsASession(t *testing.T) {
	fake := slacktest.New(t, slackBotToken)
	script := func(c modeltest.Conversation) (modeltest.Turn, error) {
		asked := prompts(c)
		switch {
		case len(asked) == 1 && modeltest.Turns(c) == 0:
			return modeltest.Turn{Calls: []modeltest.Call{bash("rm -rf build; echo cleaned the build")}}, nil
		case len(asked) == 1:
			return modeltest.Turn{Text: "Done: " + strings.TrimSpace(modeltest.Results(c)[0].Content)}, nil
		case len(modeltest.Results(c)) == 0:
			return modeltest.Turn{Calls: []modeltest.Call{bash("rm -rf /workspace/*; echo wiped the workspace")}}, nil
		default:
			return modeltest.Turn{Text: fmt.Sprintf("You first asked me to %q. The wipe: %s", asked[0], strings.TrimSpace(modeltest.Results(c)[0].Content))}, nil
		}
	}
	listen := natstest.FreeAddr(t)
	p := startDev(t, script, map[string]string{
		"CORRAL_REVIEWER_TOKENS":      "grace=" + graceToken + ",heidi=" + heidiToken,
		"CORRAL_SLACK_SIGNING_SECRET": slackSecret,
		"CORRAL_SLACK_BOT_TOKEN":      slackBotToken,
		"CORRAL_SLACK_API_URL":        fake.URL(),
		"CORRAL_SLACK_LISTEN":         listen,
		"CORRAL_SLACK_TENANT":         "acme",
		"CORRAL_SLACK_REVIEWERS":      "U0GRACE:grace",
	})
	app := slacktest.App{URL: "http://" + listen, Secret: slackSecret, Team: slackTeam, Bot: "U0BOT"}
	natstest.WaitFor(t, 15*time.Second, func() error {
		r, err := app.Send(slackbridge.PathEvents, "application/json", slacktest.URLVerification("ch"), time.Now())
		if err == nil && r.Body != "ch" {
			err = fmt.Errorf("url verification answered %d %q", r.Status, r.Body)
		}
		return err
	})
	send := func(r slacktest.Response, err error) {
		t.Helper()
		if err != nil || r.Status != 200 {
			t.Fatalf("bridge answered %d %q, %v", r.Status, r.Body, err)
		}
	}

	root := fake.Post("C1", "", "U1", "<@U0BOT> clean the build")
	mention := app.AppMention("C1", "U1", "clean the build", root, "")
	send(app.Event("Ev1", mention))
	send(app.Event("Ev1", mention, "X-Slack-Retry-Num", "1", "X-Slack-Retry-Reason", "http_timeout"))
	session := slackbridge.SessionID(slackTeam, "C1", root)

	var ask slacktest.Message
	natstest.WaitFor(t, 30*time.Second, func() error {
		for _, m := range appMessages(fake, "C1", root) {
			if m.HasButtons() {
				ask = m
				return nil
			}
		}
		return fmt.Errorf("no approval in the thread: %q", slacktest.Texts(appMessages(fake, "C1", root)))
	})
	if !strings.Contains(string(ask.Blocks), "rm -rf build") {
		t.Errorf("the approval does not show the call: %s", ask.Blocks)
	}
	value := buttonValue(t, ask)
	if !strings.HasPrefix(value, session.String()+"/") {
		t.Errorf("button value %q does not name session %s", value, session)
	}

	// Someone who is not a reviewer clicks: refused, only they are told.
	send(app.Click("C1", "U0MALLORY", ask.TS, root, slackbridge.ActionApprove, value))
	natstest.WaitFor(t, 10*time.Second, func() error {
		if e := fake.Ephemerals("U0MALLORY"); len(e) == 0 || !strings.Contains(e[0].Text, "not one of Corral's reviewers") {
			return fmt.Errorf("ephemerals to U0MALLORY: %+v", e)
		}
		return nil
	})
	if _, listing := p.pending(t, "acme"); !strings.Contains(listing, "pending") {
		t.Errorf("after a refused click the call is not pending:\n%s", listing)
	}

	// Grace approves: the call runs and the session goes on to its answer.
	send(app.Click("C1", "U0GRACE", ask.TS, root, slackbridge.ActionApprove, value))
	natstest.WaitFor(t, 60*time.Second, func() error {
		msgs := appMessages(fake, "C1", root)
		texts := slacktest.Texts(msgs)
		if len(texts) == 0 || texts[len(texts)-1] != "Done: cleaned the build" {
			return fmt.Errorf("no answer in the thread: %q", texts)
		}
		return nil
	})
	decided, _ := fake.Message("C1", ask.TS)
	if decided.HasButtons() || !strings.Contains(string(decided.Blocks), "Approved") || !strings.Contains(string(decided.Blocks), "grace") {
		t.Errorf("the approval does not show who decided: %s", decided.Blocks)
	}
	// The progress message said what was going on as it went, and ended
	// saying how many calls ran.
	var progress []string
	for _, c := range fake.Calls("") {
		text, _ := c.Args["text"].(string)
		if (c.Method == "chat.postMessage" || c.Method == "chat.update") && c.Args["channel"] == "C1" && strings.ContainsAny(text, "⏳⏸✅") {
			progress = append(progress, text)
		}
	}
	if !inOrder(progress, "⏳ Working on it…", "⏸ Waiting for a reviewer (0 tool calls so far)", "⏳ Working on it…", "✅ Done after 1 tool call.") {
		t.Errorf("progress in the thread: %q", progress)
	}
	var requested int
	var decision *event.ApprovalDecided
	for _, ev := range p.events(t, session) {
		switch e := ev.(type) {
		case *event.SessionRequested:
			requested++
			if e.User != "slack:U1" || e.Tenant != "acme" {
				t.Errorf("session requested by %q in %q", e.User, e.Tenant)
			}
		case *event.ApprovalDecided:
			decision = e
		}
	}
	if requested != 1 {
		t.Errorf("%d requests recorded after a retried event, want 1", requested)
	}
	// Decided as the reviewer of the bridge's credential, the only one it
	// may name; the reason names who clicked.
	if decision == nil || !decision.Approved || decision.Reviewer != slackUser || !strings.Contains(decision.Reason, "grace (slack:U0GRACE)") {
		t.Errorf("decision %+v: want approved by the bridge's reviewer, naming grace, who clicked", decision)
	}

	// A follow-up in the thread continues the same session; its call is
	// held, and Grace denies it: it does not run, and the model is told.
	reply := fake.Post("C1", root, "U1", "<@U0BOT> what did I ask first? and wipe it all")
	send(app.Event("Ev2", app.AppMention("C1", "U1", "what did I ask first? and wipe it all", reply, root)))
	var ask2 slacktest.Message
	natstest.WaitFor(t, 30*time.Second, func() error {
		for _, m := range appMessages(fake, "C1", root) {
			if m.HasButtons() {
				ask2 = m
				return nil
			}
		}
		return fmt.Errorf("no second approval in the thread: %q", slacktest.Texts(appMessages(fake, "C1", root)))
	})
	send(app.Click("C1", "U0GRACE", ask2.TS, root, slackbridge.ActionDeny, buttonValue(t, ask2)))
	want := `You first asked me to "clean the build". The wipe: `
	var last string
	natstest.WaitFor(t, 60*time.Second, func() error {
		texts := slacktest.Texts(appMessages(fake, "C1", root))
		if last = texts[len(texts)-1]; !strings.HasPrefix(last, want) {
			return fmt.Errorf("no second answer in the thread: %q", texts)
		}
		return nil
	})
	if !strings.Contains(last, "denied") || strings.Contains(last, "wiped the workspace") {
		t.Errorf("the second answer = %q, want the call's refusal", last)
	}
	denied, _ := fake.Message("C1", ask2.TS)
	if denied.HasButtons() || !strings.Contains(string(denied.Blocks), "Denied") || !strings.Contains(string(denied.Blocks), "grace") {
		t.Errorf("the denial does not show who decided: %s", denied.Blocks)
	}
	requested = 0
	var decisions []*event.ApprovalDecided
	for _, ev := range p.events(t, session) {
		switch e := ev.(type) {
		case *event.SessionRequested:
			requested++
		case *event.ApprovalDecided:
			decisions = append(decisions, e)
		case *event.ToolCompleted:
			if strings.Contains(e.Output, "wiped the workspace") {
				t.Errorf("the denied call ran: %q", e.Output)
			}
		}
	}
	if requested != 2 {
		t.Errorf("%d requests in the session's log, want 2", requested)
	}
	if len(decisions) != 2 || decisions[1].Approved || decisions[1].Reviewer != slackUser || !strings.Contains(decisions[1].Reason, "grace (slack:U0GRACE)") {
		t.Errorf("decisions %+v: want the second denied by the bridge's reviewer, naming grace, who clicked", decisions)
	}
	if n := len(p.model.Requests()); n != 4 {
		t.Errorf("the model was asked %d times, want 4", n)
	}
	var answers int
	for _, m := range appMessages(fake, "C1", root) {
		if strings.HasPrefix(m.Text, "Done: ") {
			answers++
		}
	}
	if answers != 1 {
		t.Errorf("the first answer is in the thread %d times", answers)
	}
}

// inOrder reports whether want appear in got in this order, not
// necessarily next to each other.
func inOrder(got []string, want ...string) bool {
	for _, g := range got {
		if len(want) > 0 && g == want[0] {
			want = want[1:]
		}
	}
	return len(want) == 0
}

// corral dev issues the Slack bridge's credential of each tenant it serves
// once, keeps it in --data and signs the bridge in with it again after a
// restart; mapping reviewers makes it a reviewer's, and revokes the bot's.
func TestSlackDevKeepsTheBridgesCredentials(t *testing.T) {
	fake := slacktest.New(t, slackBotToken)
	addr, data, listen := natstest.FreeAddr(t), t.TempDir(), natstest.FreeAddr(t)
	script := func(c modeltest.Conversation) (modeltest.Turn, error) {
		return modeltest.Turn{Text: "Answered: " + c.Messages[0].Text}, nil
	}
	env := map[string]string{
		"CORRAL_SLACK_SIGNING_SECRET": slackSecret,
		"CORRAL_SLACK_BOT_TOKEN":      slackBotToken,
		"CORRAL_SLACK_API_URL":        fake.URL(),
		"CORRAL_SLACK_LISTEN":         listen,
		"CORRAL_SLACK_TEAMS":          slackTeam + "=acme",
	}
	app := slacktest.App{URL: "http://" + listen, Secret: slackSecret, Team: slackTeam, Bot: "U0BOT"}
	kept := func() devCredential {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(data, devAuthFile))
		if err != nil {
			t.Fatal(err)
		}
		var a devAuth
		if err := json.Unmarshal(b, &a); err != nil {
			t.Fatal(err)
		}
		if len(a.Slack) != 1 {
			t.Fatalf("kept Slack credentials: %+v, want acme's", a.Slack)
		}
		return a.Slack["acme"]
	}
	ask := func(n int) {
		t.Helper()
		prompt := fmt.Sprintf("question %d", n)
		root := fake.Post("C1", "", "U1", "<@U0BOT> "+prompt)
		natstest.WaitFor(t, 15*time.Second, func() error {
			r, err := app.Event(fmt.Sprint("Ev", n), app.AppMention("C1", "U1", prompt, root, ""))
			if err == nil && r.Status != 200 {
				err = fmt.Errorf("bridge answered %d %q", r.Status, r.Body)
			}
			return err
		})
		natstest.WaitFor(t, 30*time.Second, func() error {
			texts := slacktest.Texts(appMessages(fake, "C1", root))
			if len(texts) == 0 || texts[len(texts)-1] != "Answered: "+prompt {
				return fmt.Errorf("thread: %q", texts)
			}
			return nil
		})
	}

	_, stop := startDevAt(t, addr, data, script, env)
	ask(1)
	stop()
	firstKept := kept()
	first := firstKept.Credential
	if first.Tenant != "acme" || first.Role != credential.RoleBot {
		t.Errorf("the bridge's credential: %+v, want a bot's of acme", first)
	}
	_, stop = startDevAt(t, addr, data, script, env)
	ask(2)
	stop()
	if again := kept().Credential; again.ID != first.ID {
		t.Errorf("after a restart the bridge signs in as %s, want %s again", again.ID, first.ID)
	}
	env["CORRAL_SLACK_REVIEWERS"] = "U0GRACE:grace"
	p, stop := startDevAt(t, addr, data, script, env)
	ask(3)
	if nc, err := nats.Connect(p.url, nats.UserInfo(first.ID, firstKept.Secret), nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Error("the bot's credential the reviewer's replaced still signs in")
	}
	stop()
	if rev := kept().Credential; rev.Role != credential.RoleReviewer || rev.Tenant != "acme" || rev.User != slackUser {
		t.Errorf("with reviewers the bridge's credential is %+v, want a reviewer's of acme, %s", rev, slackUser)
	}
}
