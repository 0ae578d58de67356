package slackbridge_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/model"
	"corral.dev/pkg/natstest"
	"corral.dev/services/slack-bridge/slacktest"
)

// say publishes a piece of the model's text of turn 1 of session on its
// live subject, as the harness does while the model streams.
func (f *fixture) say(t *testing.T, session uuid.UUID, seq int, text string) {
	t.Helper()
	b, err := json.Marshal(event.Live{Kind: event.LiveText, Turn: 1, Attempt: 1, Seq: seq, Text: text})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.js.Conn().Publish(bus.LiveSubject("acme", session), b); err != nil {
		t.Fatal(err)
	}
}

// The progress message of a thread's request shows the model's text as
// it streams, changed at most once a second however fast the text comes,
// and shows it no more once the turn is recorded.
func TestProgressShowsTheModelsTextAsItStreams(t *testing.T) {
	f := newFixture(t, nil)
	root := f.slack.Post("C1", "", "U1", "<@U0BOT> explain")
	ok(t)(f.app.Event("Ev1", f.app.AppMention("C1", "U1", "explain", root, "")))
	req := f.requests(t)[0]
	f.record(t, &event.SessionRequested{Header: header(event.TypeSessionRequested, req.Tenant, req.Session), Request: req.ID, User: req.User, Model: "openai:gpt-test", Prompt: req.Prompt})
	var progress slacktest.Message
	natstest.WaitFor(t, 20*time.Second, func() error {
		for _, m := range f.replies("C1", root) {
			if strings.HasPrefix(m.Text, "⏳ Working on it") {
				progress = m
				return nil
			}
		}
		return fmt.Errorf("no progress message in %q", slacktest.Texts(f.replies("C1", root)))
	})
	shows := func(want string) {
		t.Helper()
		natstest.WaitFor(t, 10*time.Second, func() error {
			m, _ := f.slack.Message("C1", progress.TS)
			if !strings.Contains(m.Text, want) {
				return fmt.Errorf("the progress message reads %q, want it to show %q", m.Text, want)
			}
			return nil
		})
	}

	// The first piece shows as it comes.
	f.say(t, req.Session, 1, "Looking at <the> files")
	shows("⏳ Working on it…\n> Looking at &lt;the&gt; files")
	// Then fifty pieces at once: shown within a change or two, a second
	// apart.
	var text strings.Builder
	text.WriteString("Looking at <the> files")
	for i := range 50 {
		piece := fmt.Sprintf(" and file %d", i)
		if i == 25 {
			piece += "\nthen"
		}
		text.WriteString(piece)
		f.say(t, req.Session, i+2, piece)
	}
	shows("and file 25\n> then and file 26")
	shows("and file 49")
	var updates []slacktest.Call
	for _, c := range f.slack.Calls("chat.update") {
		if c.Args["ts"] == progress.TS {
			updates = append(updates, c)
		}
	}
	if len(updates) > 3 {
		t.Errorf("the progress message was changed %d times for 51 pieces of text, want it throttled", len(updates))
	}
	for i := 1; i < len(updates); i++ {
		if gap := updates[i].At.Sub(updates[i-1].At); gap < 900*time.Millisecond {
			t.Errorf("the progress message was changed twice within %s", gap)
		}
	}

	// The turn recorded, and the session done: the text shows no more.
	f.record(t, &event.ModelResponded{Header: header(event.TypeModelResponded, req.Tenant, req.Session), Turn: 1, Model: "openai:gpt-test",
		Content: []model.Block{{Type: model.TextBlock, Text: text.String()}}, StopReason: "end_turn", User: req.User})
	f.record(t, &event.SessionCompleted{Header: header(event.TypeSessionCompleted, req.Tenant, req.Session), Answer: text.String(), Turns: 1})
	natstest.WaitFor(t, 20*time.Second, func() error {
		m, _ := f.slack.Message("C1", progress.TS)
		if m.Text != "✅ Done after 0 tool calls." {
			return fmt.Errorf("the progress message reads %q", m.Text)
		}
		return nil
	})
}
