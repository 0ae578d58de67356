package slackbridge_test

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	slackbridge "corral.dev/services/slack-bridge"
	"corral.dev/services/slack-bridge/slacktest"
)

// FuzzRequests sends the bridge signed requests of any content on each of
// Slack's paths, through a real bridge: it answers each with 200 or a 4xx
// (a 5xx would tell Slack to send it again, and again), and every request
// for a session it publishes is its workspace's tenant's.
func FuzzRequests(f *testing.F) {
	fx := newFixture(f, nil)
	mention, _ := json.Marshal(fx.app.Callback("Ev1", fx.app.AppMention("C1", "U1", "hi", "1700000000.000100", "")))
	dm, _ := json.Marshal(fx.app.Callback("Ev2", slacktest.DirectMessage("D1", "U1", "hello", "1700000000.000200", "")))
	other, _ := json.Marshal(fx.app.Callback("Ev3", map[string]any{"type": "reaction_added", "user": "U1"}))
	cmd := fx.app.CommandRequest("C1", "U1", "/corral", "summarise")
	click, _ := json.Marshal(map[string]any{"type": "block_actions", "user": map[string]any{"id": "U1"}, "actions": []map[string]any{{"action_id": "other", "value": "x"}}})
	f.Add(0, mention)
	f.Add(0, dm)
	f.Add(0, other)
	f.Add(0, slacktest.URLVerification("challenge"))
	f.Add(0, []byte(`{"type":"event_callback","event":{"type":"app_mention"}}`))
	f.Add(1, cmd.Body)
	f.Add(1, []byte("team_id=T0OTHER&text=hi&channel_id=C1&user_id=U1"))
	f.Add(2, []byte(url.Values{"payload": {string(click)}}.Encode()))
	f.Add(2, []byte("payload=%7B"))
	f.Cleanup(func() {
		for _, m := range fx.requestMsgs(f) {
			if m.Tenant != "acme" || !strings.HasPrefix(m.Subject, "requests.acme.") {
				f.Errorf("a request of tenant %q on %s", m.Tenant, m.Subject)
			}
		}
	})
	paths := []struct{ path, contentType string }{
		{slackbridge.PathEvents, "application/json"},
		{slackbridge.PathCommands, "application/x-www-form-urlencoded"},
		{slackbridge.PathInteractive, "application/x-www-form-urlencoded"},
	}
	f.Fuzz(func(t *testing.T, which int, body []byte) {
		p := paths[(which%len(paths)+len(paths))%len(paths)]
		r, err := fx.app.Send(p.path, p.contentType, body, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if r.Status >= 500 || r.Status == 401 {
			t.Fatalf("%s %q: %d %s", p.path, body, r.Status, r.Body)
		}
	})
}
