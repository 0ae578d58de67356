package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
	"corral.dev/pkg/credentialtest"
	"corral.dev/pkg/event"
	"corral.dev/pkg/logtest"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/sessionlog"
	"corral.dev/services/auth"
	slackbridge "corral.dev/services/slack-bridge"
	"corral.dev/services/slack-bridge/slacktest"
)

// slackKey is the subject of key in the Slack bridge's bucket.
func slackKey(key string) string { return "$KV." + slackbridge.Bucket + "." + key }

// TestSlackBridgeCredential checks what the Slack bridge's credential, a
// bot's of acme, may do under deploy/nats.conf after `corral setup`: keep
// acme's threads and publish acme's requests; and what it may not: publish
// a request of initech's, read or write initech's threads or logs, purge
// or roll up the bucket, decide an approval, or create a stream.
func TestSlackBridgeCredential(t *testing.T) {
	url, seed := startDeployedServer(t)
	admin := map[string]string{"CORRAL_NATS_USER": "admin", "CORRAL_NATS_PASSWORD": password("admin")}
	var out, errs logtest.Buffer
	if code := run(context.Background(), []string{"setup", "--nats", url}, func(k string) string { return admin[k] }, &out, &errs); code != 0 {
		t.Fatalf("corral setup exited %d: %s", code, errs.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ajs, _ := connectAs(t, url, credential.UserAdmin)
	startAuth(t, url, seed)

	// initech's thread and log, which acme's bridge must not reach.
	theirs := uuid.Must(uuid.NewV7())
	kv, err := ajs.KeyValue(ctx, slackbridge.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "initech.thread."+theirs.String(), []byte(`{"tenant":"initech"}`)); err != nil {
		t.Fatal(err)
	}
	requested := &event.SessionRequested{Header: event.NewHeader(event.TypeSessionRequested, "initech", theirs), Request: uuid.Must(uuid.NewV7()), User: "ada", Prompt: "initech's secret"}
	if err := sessionlog.New(ajs, sessionlog.Options{As: sessionlog.Harness}).Record(ctx, requested, requested.ID.String()); err != nil {
		t.Fatal(err)
	}

	bot, secret := credentialtest.Issue(t, ajs, "acme", "slack", credential.RoleBot)
	js, v := connectWith(t, url, bot.ID, secret)
	if who, err := credential.Whoami(ctx, js.Conn()); err != nil || who.Tenant != "acme" || who.Role != credential.RoleBot {
		t.Fatalf("Whoami = %+v, %v; want acme's bot", who, err)
	}

	// What it does.
	ours := uuid.Must(uuid.NewV7())
	if _, err := js.Publish(ctx, slackKey("acme.thread."+ours.String()), []byte(`{"tenant":"acme"}`), jetstream.WithExpectLastSequencePerSubject(0)); err != nil {
		t.Errorf("create acme's thread: %v", err)
	}
	last, err := bus.LastBySubject(ctx, js, "KV_"+slackbridge.Bucket, slackKey("acme.thread."+ours.String()))
	if err != nil {
		t.Fatalf("read acme's thread: %v", err)
	}
	if _, err := js.Publish(ctx, slackKey("acme.thread."+ours.String()), []byte(`{"tenant":"acme","seq":1}`), jetstream.WithExpectLastSequencePerSubject(last.StreamSeq)); err != nil {
		t.Errorf("update acme's thread: %v", err)
	}
	if _, err := js.Publish(ctx, slackKey("acme.thread."+ours.String()), []byte(`{}`), jetstream.WithExpectLastSequencePerSubject(last.StreamSeq)); !bus.Conflict(err) {
		t.Errorf("update acme's thread from an old revision: %v, want a conflict", err)
	}
	if msgs, err := bus.ReadByConsumer(ctx, js, "KV_"+slackbridge.Bucket, slackKey("acme.thread.*"), 0); err != nil || len(msgs) != 1 {
		t.Errorf("list acme's threads: %d, %v; want 1", len(msgs), err)
	}
	req := event.Request{Header: event.NewHeader(event.TypeRequest, "acme", ours), User: "slack:U1", Prompt: "hi"}
	if err := bus.Publish(ctx, js, bus.RequestSubject("acme", ours, req.User), req.ID.String(), &req); err != nil {
		t.Errorf("publish acme's request: %v", err)
	}
	if errs := v.all(); len(errs) > 0 {
		t.Errorf("permission violations in the bridge's work: %v", errs)
	}

	// What it may not: each attempt is refused by the server, which
	// reports a violation naming mark.
	type attempt struct {
		watch, mark string // the subjects refused: as a filter, and as reported
		do          func(ctx context.Context) error
	}
	publish := func(subject string, data []byte) attempt {
		return attempt{subject, subject, func(ctx context.Context) error {
			_, err := js.Publish(ctx, subject, data)
			return err
		}}
	}
	request := func(subject string) attempt {
		return attempt{subject, subject, func(ctx context.Context) error {
			_, err := js.Conn().RequestWithContext(ctx, subject, []byte(`{}`))
			return err
		}}
	}
	get := func(stream, filter string) attempt {
		subject := "$JS.API.DIRECT.GET." + stream + "." + filter
		return attempt{subject, subject, func(ctx context.Context) error {
			_, err := bus.LastBySubject(ctx, js, stream, filter)
			return err
		}}
	}
	consume := func(stream, filter string) attempt {
		return attempt{bus.ConsumerAPI(stream), "." + filter, func(ctx context.Context) error {
			cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
			if err != nil {
				return err
			}
			_, err = cons.Next(jetstream.FetchContext(ctx))
			return err
		}}
	}
	theirReq := event.Request{Header: event.NewHeader(event.TypeRequest, "initech", theirs), User: "slack:U1", Prompt: "hi"}
	theirReqData, _ := json.Marshal(&theirReq)
	slackStream := "KV_" + slackbridge.Bucket
	for _, tc := range []struct {
		what string
		attempt
	}{
		{"publish initech's request", publish(bus.RequestSubject("initech", theirs, "slack:U1"), theirReqData)},
		{"write initech's thread", publish(slackKey("initech.thread."+theirs.String()), []byte(`{}`))},
		{"write a key of no tenant", publish(slackKey("thread.initech."+theirs.String()), []byte(`{}`))},
		{"read initech's thread", get(slackStream, slackKey("initech.thread."+theirs.String()))},
		{"a consumer of initech's threads", consume(slackStream, slackKey("initech.>"))},
		{"a consumer of every thread", consume(slackStream, slackKey(">"))},
		{"read initech's log", get(bus.StreamEvents, bus.SessionEvents("initech", theirs))},
		{"a consumer of initech's log", consume(bus.StreamEvents, bus.SessionEvents("initech", theirs))},
		{"decide an approval", request(bus.ApprovalAPI("acme", bus.UserToken("slack"), bus.OpDecide))},
		{"purge the bucket", request("$JS.API.STREAM.PURGE." + slackStream)},
		{"the bucket's stream info", request("$JS.API.STREAM.INFO." + slackStream)},
		{"create a stream", request("$JS.API.STREAM.CREATE.EVIL")},
	} {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		ctx, stop := bus.WhilePermitted(ctx, js.Conn(), tc.watch)
		err := tc.do(ctx)
		stop()
		cancel()
		if err == nil {
			t.Errorf("%s: done", tc.what)
			continue
		}
		natstest.WaitFor(t, 5*time.Second, func() error {
			if !v.seen(tc.mark) {
				return fmt.Errorf("%s: %v, and no permission violation for %s", tc.what, err, tc.mark)
			}
			return nil
		})
	}

	// Nor purge every tenant's threads by a roll-up on its own key, which
	// the server may not refuse by subject.
	roll := nats.NewMsg(slackKey("acme.thread." + ours.String()))
	roll.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupAll)
	roll.Data = []byte(`{}`)
	if _, err := js.PublishMsg(ctx, roll); err == nil {
		t.Error("a roll-up of the bucket was taken")
	}
	if _, err := kv.Get(ctx, "initech.thread."+theirs.String()); err != nil {
		t.Errorf("initech's thread after acme's bot's roll-up: %v", err)
	}
}

// startAuth runs the auth service on the deployed server at url with the
// issuer seed, until the test ends: clients can sign in once it returns.
func startAuth(t *testing.T, url, seed string) {
	t.Helper()
	js, _ := connectAs(t, url, credential.UserAuth)
	runAuth(t, js, seed, slog.New(slog.DiscardHandler))
}

// runAuth runs the auth service, signed in through js, with the issuer
// seed, until the test ends, and returns once it takes the server's
// questions.
func runAuth(t *testing.T, js jetstream.JetStream, seed string, log *slog.Logger) {
	t.Helper()
	cfg, err := auth.LoadConfig(func(k string) string { return map[string]string{"CORRAL_AUTH_ISSUER_SEED": seed}[k] })
	if err != nil {
		t.Fatal(err)
	}
	svc, err := auth.New(context.Background(), cfg, js, log)
	if err != nil {
		t.Fatal(err)
	}
	// Registered after the connection's close, so it runs before it.
	natstest.Serve(t, svc.Run)
	select {
	case <-svc.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("the auth service is not ready")
	}
}

// A bridge serving two tenants signs in with each tenant's credential and
// does all it does for a workspace through its tenant's connection: each
// workspace's thread is a session of its own tenant, answered, with no
// permission violation on either connection (a request or thread of
// initech's through acme's connection would be one).
func TestSlackBridgeServesEachTenantWithItsCredential(t *testing.T) {
	d := startDeployment(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
		return modeltest.Turn{Text: "The answer to " + c.Messages[0].Text}, nil
	}, nil)
	ctx := context.Background()
	creds := map[string]credential.Credential{}
	var logins []string
	for _, tenant := range []string{"acme", "initech"} {
		c, secret := credentialtest.Issue(t, d.admin, tenant, "slack", credential.RoleBot)
		creds[tenant] = c
		logins = append(logins, tenant+"="+c.ID+":"+secret)
	}
	fake := slacktest.New(t, slackBotToken)
	listen := natstest.FreeAddr(t)
	env := map[string]string{
		"CORRAL_NATS_URL":             d.url,
		"CORRAL_SLACK_SIGNING_SECRET": slackSecret,
		"CORRAL_SLACK_BOT_TOKEN":      slackBotToken,
		"CORRAL_SLACK_API_URL":        fake.URL(),
		"CORRAL_SLACK_LISTEN":         listen,
		"CORRAL_SLACK_TEAMS":          "T0ACME=acme,T0INITECH=initech",
		"CORRAL_SLACK_CREDENTIALS":    strings.Join(logins, ","),
	}
	cfg, err := slackbridge.LoadConfig(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	v := &violations{}
	log := slog.New(slog.NewTextHandler(v, nil))
	conns, err := slackbridge.Connect(ctx, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	for tenant, c := range conns {
		t.Cleanup(c.NC.Close)
		if c.Credential.ID != creds[tenant].ID || c.Credential.Tenant != tenant {
			t.Errorf("tenant %s's connection is signed in as %+v", tenant, c.Credential)
		}
	}
	svc, err := slackbridge.New(ctx, cfg, conns, log)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("bridge: %v", err)
		}
	})
	actx, acancel := context.WithTimeout(ctx, 10*time.Second)
	defer acancel()
	if _, err := svc.Addr(actx); err != nil {
		t.Fatal(err)
	}

	kv, err := d.admin.KeyValue(ctx, slackbridge.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct{ team, tenant, channel string }{{"T0ACME", "acme", "CACME"}, {"T0INITECH", "initech", "CINITECH"}} {
		app := slacktest.App{URL: "http://" + listen, Secret: slackSecret, Team: w.team, Bot: "U0BOT"}
		prompt := w.tenant + "'s question"
		root := fake.Post(w.channel, "", "U1", "<@U0BOT> "+prompt)
		r, err := app.Event("Ev"+w.team, app.AppMention(w.channel, "U1", prompt, root, ""))
		if err != nil || r.Status != 200 {
			t.Fatalf("%s's mention: %d %s %v", w.team, r.Status, r.Body, err)
		}
		natstest.WaitFor(t, 30*time.Second, func() error {
			texts := slacktest.Texts(appMessages(fake, w.channel, root))
			if len(texts) == 0 || texts[len(texts)-1] != "The answer to "+prompt {
				return fmt.Errorf("%s's thread: %q", w.team, texts)
			}
			return nil
		})
		session := slackbridge.SessionID(w.team, w.channel, root)
		evs, _, err := sessionlog.New(d.admin, sessionlog.Options{Reader: "test"}).ReadAll(ctx, w.tenant, session)
		if err != nil || len(evs) == 0 {
			t.Errorf("%s's session in tenant %s's log: %d events, %v", w.team, w.tenant, len(evs), err)
		}
		if _, err := kv.Get(ctx, w.tenant+".thread."+session.String()); err != nil {
			t.Errorf("%s's thread under tenant %s: %v", w.team, w.tenant, err)
		}
		// A slash command is claimed under the tenant's keys, once.
		cmd := app.CommandRequest(w.channel, "U1", "/corral", "a command")
		for _, want := range []string{"On it", "taken already"} {
			r, err := app.Post(cmd)
			if err != nil || !strings.Contains(r.Body, want) {
				t.Errorf("%s's slash command: %d %s %v, want %q", w.team, r.Status, r.Body, err, want)
			}
		}
	}
	if errs := v.all(); len(errs) > 0 {
		t.Errorf("the bridge's connections hit permission violations: %v", errs)
	}
}

// The bridge refuses to start with a credential listed for another tenant
// than its own, one that is not a bot's or a reviewer's, a bot's when it
// maps reviewers, or one the server does not let in: what the auth service
// made of each sign-in, as the server tells it, is what is checked.
func TestSlackBridgeRefusesCredentials(t *testing.T) {
	url, seed := startDeployedServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ajs, _ := connectAs(t, url, credential.UserAdmin)
	if err := bus.Setup(ctx, ajs); err != nil {
		t.Fatal(err)
	}
	startAuth(t, url, seed)
	login := func(tenant, user string, role credential.Role) string {
		c, secret := credentialtest.Issue(t, ajs, tenant, user, role)
		return c.ID + ":" + secret
	}
	acmeBot, acmeReviewer := login("acme", "slack", credential.RoleBot), login("acme", "slack", credential.RoleReviewer)
	cases := []struct {
		name        string
		credentials string
		reviewers   string
		wantErr     string
	}{
		{"a bot's of its tenant", "acme=" + acmeBot, "", ""},
		{"a reviewer's of its tenant", "acme=" + acmeReviewer, "U0GRACE:grace", ""},
		{"another tenant's", "acme=" + login("initech", "slack", credential.RoleBot), "", "is tenant initech's"},
		{"a user's", "acme=" + login("acme", "ada", credential.RoleUser), "", "user ada's"},
		{"an operator's", "acme=" + login(credential.AllTenants, "olga", credential.RoleOperator), "", "operator's"},
		{"a bot's with reviewers", "acme=" + acmeBot, "U0GRACE:grace", "may not decide approvals"},
		{"a wrong secret", "acme=" + strings.Split(acmeBot, ":")[0] + ":not-the-secret", "", "Authorization Violation"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{
				"CORRAL_NATS_URL": url, "CORRAL_SLACK_SIGNING_SECRET": slackSecret, "CORRAL_SLACK_BOT_TOKEN": slackBotToken,
				"CORRAL_SLACK_TENANT": "acme", "CORRAL_SLACK_CREDENTIALS": tc.credentials, "CORRAL_SLACK_REVIEWERS": tc.reviewers,
			}
			cfg, err := slackbridge.LoadConfig(func(k string) string { return env[k] })
			if err != nil {
				t.Fatal(err)
			}
			conns, err := slackbridge.Connect(ctx, cfg, slog.New(slog.DiscardHandler), nats.MaxReconnects(0))
			for _, c := range conns {
				c.NC.Close()
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Connect: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("Connect: %v, want an error saying %q", err, tc.wantErr)
			}
		})
	}
}
