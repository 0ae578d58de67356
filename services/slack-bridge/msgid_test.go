package slackbridge_test

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	slackbridge "corral.dev/services/slack-bridge"
)

// A Slack message's request ID is worked out from what anyone in the
// channel sees. A client of another tenant that publishes first, on a
// request subject of its own, a request whose message ID is that ID (or
// the thread's session's) drops nothing: the bridge's request is queued.
func TestRequestNotDroppedByAnothersMessageID(t *testing.T) {
	f := newFixture(t, nil)
	root := f.slack.Post("C1", "", "U1", "<@U0BOT> list the files")
	own := uuid.Must(uuid.NewV7())
	first := event.Request{Header: event.NewHeader(event.TypeRequest, "globex", own), User: "eve", Prompt: "first"}
	subject := bus.RequestSubject("globex", own, "eve")
	for _, id := range []uuid.UUID{slackbridge.RequestID(team, "C1", root), slackbridge.SessionID(team, "C1", root)} {
		if err := bus.Publish(context.Background(), f.js, subject, id.String(), &first); err != nil {
			t.Fatal(err)
		}
	}
	ok(t)(f.app.Event("Ev1", f.app.AppMention("C1", "U1", "list the files", root, "")))
	// Slack's retry is still dropped.
	ok(t)(f.app.Event("Ev1", f.app.AppMention("C1", "U1", "list the files", root, ""), "X-Slack-Retry-Num", "1", "X-Slack-Retry-Reason", "http_timeout"))
	var acme []event.Request
	for _, r := range f.requests(t) {
		if r.Tenant == "acme" {
			acme = append(acme, r)
		}
	}
	if len(acme) != 1 || acme[0].Prompt != "list the files" || acme[0].ID != slackbridge.RequestID(team, "C1", root) {
		t.Errorf("acme's requests = %+v, want the mention's, once", acme)
	}
}
