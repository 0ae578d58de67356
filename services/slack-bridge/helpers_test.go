package slackbridge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
	"corral.dev/pkg/event"
	"corral.dev/pkg/logtest"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/sessionlog"
	slackbridge "corral.dev/services/slack-bridge"
	"corral.dev/services/slack-bridge/slacktest"
)

const (
	secret = "8f742231b10e8888abcd99yyyzzz85a5"
	token  = "xoxb-17653672481-19874698323-pdFZKVeTuE8sk7oOcBrzbqgy"
	team   = "T0TEAM"
	bot    = "U0BOT"
)

// fixture is a bridge on an embedded NATS server, talking to a fake Slack.
// The server signs in anyone with every permission: what the bridge's
// credentials may do is proved in services/corral, under deploy/nats.conf.
type fixture struct {
	js    jetstream.JetStream
	slack *slacktest.Server
	app   slacktest.App
	env   map[string]string
	log   *logtest.Buffer
	stop  func()
}

// reviewer is the reviewer of the fixture's credentials.
const reviewer = "slack"

// credentialOf returns the credential the fixture's bridge is told its
// connection for tenant is signed in with: a reviewer's of tenant.
func credentialOf(tenant string) credential.Credential {
	return credential.Credential{ID: "c-" + fmt.Sprintf("%032x", len(tenant)), Tenant: tenant, User: reviewer, Role: credential.RoleReviewer}
}

func newFixture(t testing.TB, env map[string]string) *fixture {
	t.Helper()
	_, _, js := natstest.Run(t)
	if _, err := slackbridge.Setup(context.Background(), js); err != nil {
		t.Fatal(err)
	}
	f := &fixture{js: js, slack: slacktest.New(t, token), log: &logtest.Buffer{}}
	f.env = map[string]string{
		"CORRAL_SLACK_SIGNING_SECRET": secret,
		"CORRAL_SLACK_BOT_TOKEN":      token,
		"CORRAL_SLACK_API_URL":        f.slack.URL(),
		"CORRAL_SLACK_LISTEN":         natstest.FreeAddr(t),
		"CORRAL_SLACK_TEAMS":          team + "=acme",
		"CORRAL_SLACK_CREDENTIALS":    "acme=" + credentialOf("acme").ID + ":secret",
	}
	for k, v := range env {
		f.env[k] = v
	}
	f.app = slacktest.App{URL: "http://" + f.env["CORRAL_SLACK_LISTEN"], Secret: secret, Team: team, Bot: bot}
	f.start(t)
	return f
}

// conns returns a connection for each tenant cfg serves, all f.js's.
func (f *fixture) conns(cfg slackbridge.Config) map[string]slackbridge.Conn {
	out := make(map[string]slackbridge.Conn)
	for tenant := range cfg.Credentials {
		out[tenant] = slackbridge.Conn{NC: f.js.Conn(), Credential: credentialOf(tenant)}
	}
	return out
}

// start runs a bridge; f.stop stops it and waits.
func (f *fixture) start(t testing.TB) {
	t.Helper()
	cfg, err := slackbridge.LoadConfig(func(k string) string { return f.env[k] })
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(f.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := slackbridge.New(ctx, cfg, f.conns(cfg), log)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	var once sync.Once
	f.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("bridge: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Errorf("bridge did not stop")
			}
			if t.Failed() {
				t.Logf("bridge log:\n%s", f.log)
			}
		})
	}
	t.Cleanup(f.stop)
	actx, acancel := context.WithTimeout(ctx, 10*time.Second)
	defer acancel()
	if _, err := svc.Addr(actx); err != nil {
		t.Fatal(err)
	}
}

// requests returns the requests published so far, read without taking
// them off their work queue.
func (f *fixture) requests(t testing.TB) []event.Request {
	t.Helper()
	var out []event.Request
	for _, r := range f.requestMsgs(t) {
		out = append(out, r.Request)
	}
	return out
}

// requestMsg is a published request and its subject.
type requestMsg struct {
	Subject string
	event.Request
}

// requestMsgs returns the requests published so far with their subjects.
func (f *fixture) requestMsgs(t testing.TB) []requestMsg {
	t.Helper()
	ctx := context.Background()
	stream, err := f.js.Stream(ctx, bus.StreamRequests)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []requestMsg
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		r := requestMsg{Subject: m.Subject}
		if err := json.Unmarshal(m.Data, &r.Request); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// record appends ev to its session's log, as the harness would.
func (f *fixture) record(t *testing.T, ev event.Event) {
	t.Helper()
	l := sessionlog.New(f.js, sessionlog.Options{As: sessionlog.Harness})
	if err := l.Record(context.Background(), ev, ev.Head().ID.String()); err != nil {
		t.Fatal(err)
	}
}

func header(typ, tenant string, session uuid.UUID) event.Header {
	return event.NewHeader(typ, tenant, session)
}

func mustOK(t *testing.T, r slacktest.Response, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != 200 {
		t.Fatalf("status %d: %s", r.Status, r.Body)
	}
}

// ok checks a call to the bridge was answered 200: ok(t)(f.app.Event(...)).
func ok(t *testing.T) func(slacktest.Response, error) {
	t.Helper()
	return func(r slacktest.Response, err error) {
		t.Helper()
		mustOK(t, r, err)
	}
}
