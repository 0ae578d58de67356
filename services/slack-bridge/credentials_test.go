package slackbridge_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/credential"
	"corral.dev/pkg/natstest"
	slackbridge "corral.dev/services/slack-bridge"
)

// The bridge takes, for each tenant it serves, the connection of a bot's
// or a reviewer's credential of that tenant (a reviewer's when it maps
// reviewers) and no other; and it does not start without its bucket.
func TestNewTakesEachTenantsOwnCredential(t *testing.T) {
	_, nc, js := natstest.Run(t)
	env := map[string]string{
		"CORRAL_SLACK_SIGNING_SECRET": secret, "CORRAL_SLACK_BOT_TOKEN": token,
		"CORRAL_SLACK_TEAMS":       "T1=acme,T2=initech",
		"CORRAL_SLACK_CREDENTIALS": fmt.Sprintf("acme=c-%032x:pw,initech=c-%032x:pw", 1, 2),
	}
	load := func(extra ...string) slackbridge.Config {
		t.Helper()
		cfg, err := slackbridge.LoadConfig(func(k string) string {
			for i := 0; i < len(extra); i += 2 {
				if extra[i] == k {
					return extra[i+1]
				}
			}
			return env[k]
		})
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	cred := func(tenant, user string, role credential.Role) slackbridge.Conn {
		return slackbridge.Conn{NC: nc, Credential: credential.Credential{ID: fmt.Sprintf("c-%032x", len(tenant)), Tenant: tenant, User: user, Role: role}}
	}
	conns := func(acme slackbridge.Conn) map[string]slackbridge.Conn {
		return map[string]slackbridge.Conn{"acme": acme, "initech": cred("initech", "slack", credential.RoleBot)}
	}
	log := slog.New(slog.DiscardHandler)
	ctx := context.Background()

	if _, err := slackbridge.New(ctx, load(), conns(cred("acme", "slack", credential.RoleBot)), log); err == nil || !strings.Contains(err.Error(), "corral setup") {
		t.Errorf("New without the bucket: %v, want an error saying corral setup makes it", err)
	}
	if _, err := slackbridge.Setup(ctx, js); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name      string
		cfg       slackbridge.Config
		conns     map[string]slackbridge.Conn
		wantError string
	}{
		{"bots", load(), conns(cred("acme", "slack", credential.RoleBot)), ""},
		{"a reviewer", load(), conns(cred("acme", "slack", credential.RoleReviewer)), ""},
		{"reviewers mapped, reviewers' credentials", load("CORRAL_SLACK_REVIEWERS", "U1:grace"),
			map[string]slackbridge.Conn{"acme": cred("acme", "slack", credential.RoleReviewer), "initech": cred("initech", "slack", credential.RoleReviewer)}, ""},
		{"reviewers mapped, a bot's credential", load("CORRAL_SLACK_REVIEWERS", "U1:grace"),
			map[string]slackbridge.Conn{"acme": cred("acme", "slack", credential.RoleReviewer), "initech": cred("initech", "slack", credential.RoleBot)}, "initech"},
		{"another tenant's", load(), conns(cred("initech", "slack", credential.RoleBot)), "is tenant initech's"},
		{"an operator's", load(), conns(cred(credential.AllTenants, "olga", credential.RoleOperator)), "operator's"},
		{"a user's", load(), conns(cred("acme", "ada", credential.RoleUser)), "user ada's"},
		{"none", load(), map[string]slackbridge.Conn{"initech": cred("initech", "slack", credential.RoleBot)}, "no connection for tenant acme"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := slackbridge.New(ctx, tc.cfg, tc.conns, log)
			switch {
			case tc.wantError == "" && err != nil:
				t.Errorf("New: %v", err)
			case tc.wantError != "" && (err == nil || !strings.Contains(err.Error(), tc.wantError)):
				t.Errorf("New: %v, want an error saying %q", err, tc.wantError)
			}
		})
	}
}

// A workspace that maps to no tenant starts nothing: its people are told.
func TestWorkspaceOfNoTenant(t *testing.T) {
	f := newFixture(t, nil) // T0TEAM=acme, and no default tenant
	other := f.app
	other.Team = "T0OTHER"
	root := f.slack.Post("C9", "", "U9", "<@U0BOT> hi")
	ok(t)(other.Event("Ev1", other.AppMention("C9", "U9", "hi", root, "")))
	r, err := other.Command("C9", "U9", "/corral", "hi")
	mustOK(t, r, err)
	if !strings.Contains(r.Body, "not connected to Corral") {
		t.Errorf("slash command answered %s", r.Body)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if e := f.slack.Ephemerals("U9"); len(e) != 1 || !strings.Contains(e[0].Text, "not connected to Corral") {
			return fmt.Errorf("ephemerals: %+v", e)
		}
		return nil
	})
	if reqs := f.requests(t); len(reqs) != 0 {
		t.Errorf("%d requests from a workspace of no tenant", len(reqs))
	}
	if posts := f.slack.Calls("chat.postMessage"); len(posts) != 0 {
		t.Errorf("posted %+v", posts)
	}
}

// Setup makes a bucket whose stream allows no roll-up (a publish on one
// key that would purge every other), also of a bucket made before, and
// moves the threads of before under their tenants.
func TestSetupAllowsNoRollupAndMovesThreads(t *testing.T) {
	_, _, js := natstest.Run(t)
	ctx := context.Background()
	old, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: slackbridge.Bucket, History: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Put(ctx, "thread.acme.0192f0c8-0000-7000-8000-000000000001", []byte(`{"tenant":"acme"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Put(ctx, "initech.thread.0192f0c8-0000-7000-8000-000000000002", []byte(`{"tenant":"initech"}`)); err != nil {
		t.Fatal(err)
	}
	for range 2 { // and again, changing nothing
		if _, err := slackbridge.Setup(ctx, js); err != nil {
			t.Fatal(err)
		}
	}
	kv, err := js.KeyValue(ctx, slackbridge.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, "acme.thread.0192f0c8-0000-7000-8000-000000000001"); err != nil || string(e.Value()) != `{"tenant":"acme"}` {
		t.Errorf("the old thread under its tenant: %v", err)
	}
	if _, err := kv.Get(ctx, "thread.acme.0192f0c8-0000-7000-8000-000000000001"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("the old thread is still under its old key: %v", err)
	}
	roll := nats.NewMsg("$KV." + slackbridge.Bucket + ".acme.thread.x")
	roll.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupAll)
	roll.Data = []byte(`{}`)
	if _, err := js.PublishMsg(ctx, roll); err == nil {
		t.Error("a roll-up of the whole bucket was taken")
	}
	if _, err := kv.Get(ctx, "initech.thread.0192f0c8-0000-7000-8000-000000000002"); err != nil {
		t.Errorf("initech's thread after acme's roll-up: %v", err)
	}
}
