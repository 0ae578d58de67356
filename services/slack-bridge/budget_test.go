package slackbridge_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/event"
	"corral.dev/pkg/natstest"
	"corral.dev/services/slack-bridge/slacktest"
)

// A session paused over its budget says so in its thread, with what lets
// it go on, and stays followed: once a reviewer's raise resumes it, its
// answer lands in the thread.
func TestPausedSessionGoesOnInItsThread(t *testing.T) {
	f := newFixture(t, nil)
	root := f.slack.Post("C1", "", "U1", "<@U0BOT> count")
	ok(t)(f.app.Event("Ev1", f.app.AppMention("C1", "U1", "count", root, "")))
	req := f.requests(t)[0]
	f.record(t, &event.SessionRequested{Header: header(event.TypeSessionRequested, req.Tenant, req.Session), Request: req.ID, User: req.User, Model: "openai:gpt-test", Prompt: req.Prompt})
	f.record(t, &event.ToolDispatched{Header: header(event.TypeToolDispatched, req.Tenant, req.Session), Call: uuid.Must(uuid.NewV7()), Turn: 1, Name: "Bash", Summary: "ls"})
	resume := fmt.Sprintf(`corral raise --tenant %s %s --tokens 6000 --reason "why the session needs more"`, req.Tenant, req.Session)
	f.record(t, &event.SessionPaused{Header: header(event.TypeSessionPaused, req.Tenant, req.Session), Budget: "session.tokens",
		Reason: "the session went over its budget session.tokens: it used 3020 of 3000 tokens", Resume: resume})
	natstest.WaitFor(t, 20*time.Second, func() error {
		got := slacktest.Texts(f.replies("C1", root))
		if len(got) != 2 || got[0] != "⏸ Paused over its budget `session.tokens`" {
			return fmt.Errorf("thread: %q", got)
		}
		return nil
	})
	got := slacktest.Texts(f.replies("C1", root))
	for _, want := range []string{"paused over its budget `session.tokens`", "3020 of 3000 tokens", "`" + resume + "`"} {
		if !strings.Contains(got[1], want) {
			t.Errorf("pause message %q lacks %q", got[1], want)
		}
	}

	f.record(t, &event.SessionResumed{Header: header(event.TypeSessionResumed, req.Tenant, req.Session), Raise: uuid.Must(uuid.NewV7()), Reviewer: "grace"})
	f.record(t, &event.SessionCompleted{Header: header(event.TypeSessionCompleted, req.Tenant, req.Session), Answer: "3 things.", Turns: 2})
	natstest.WaitFor(t, 20*time.Second, func() error {
		got := slacktest.Texts(f.replies("C1", root))
		if len(got) != 4 || got[0] != "✅ Done after 1 tool call." || got[2] != "▶️ Going on: grace raised the session's budget." || got[3] != "3 things." {
			return fmt.Errorf("thread: %q", got)
		}
		return nil
	})
}
