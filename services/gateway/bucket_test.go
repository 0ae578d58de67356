package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
	"corral.dev/pkg/event"
	"corral.dev/pkg/natstest"
)

// TestRecordsAllowNoRollup checks that a publish on one tenant's record,
// which that tenant's clients may make, cannot roll the bucket up and
// purge every other tenant's records: the server may not refuse that by
// subject, so the bucket's stream refuses roll-ups, even where the bucket
// was made before with them allowed.
func TestRecordsAllowNoRollup(t *testing.T) {
	t.Parallel()
	_, _, js := natstest.Run(t)
	ctx := context.Background()
	// Made as a KV bucket is by default, roll-ups allowed.
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bus.BucketGateway}); err != nil {
		t.Fatal(err)
	}
	if err := Setup(ctx, js); err != nil {
		t.Fatal(err)
	}
	theirs := recordKey("initech", kindAgent, "agent_1")
	if err := writeRecord(ctx, js, theirs, agentRecord{ID: "agent_1", Name: "theirs"}, 0); err != nil {
		t.Fatal(err)
	}
	for _, rollup := range []string{jetstream.MsgRollupAll, jetstream.MsgRollupSubject} {
		m := nats.NewMsg(recordSubject(recordKey("acme", kindAgent, "agent_2")))
		m.Header.Set(jetstream.MsgRollup, rollup)
		m.Header.Set("KV-Operation", "PURGE")
		if _, err := js.PublishMsg(ctx, m); err == nil {
			t.Errorf("a roll-up (%s) of the records was taken", rollup)
		}
	}
	var a agentRecord
	if _, err := readRecord(ctx, js, theirs, &a); err != nil || a.Name != "theirs" {
		t.Errorf("initech's agent after acme's roll-ups: %+v, %v", a, err)
	}
}

// TestUsersWriteOnlyTheirOwnSessions checks, on a server enforcing the
// credentials' permissions, that a user's key can neither write, read,
// list nor delete another user's session record (one not yet started
// says what its first request starts from, and as whom), while it keeps
// its own and the tenant's agents, and a bot keeps every user's.
func TestUsersWriteOnlyTheirOwnSessions(t *testing.T) {
	t.Parallel()
	creds := map[string]credential.Credential{
		"ada": {ID: "c-ada", Tenant: "acme", User: "ada", Role: credential.RoleUser},
		"bob": {ID: "c-bob", Tenant: "acme", User: "bob", Role: credential.RoleUser},
		"bot": {ID: "c-bot", Tenant: "acme", Role: credential.RoleBot},
	}
	users := []map[string]any{{"user": "admin", "password": "admin"}}
	for name, c := range creds {
		p := c.Permissions()
		users = append(users, map[string]any{"user": name, "password": name, "permissions": map[string]any{
			"publish":   map[string]any{"allow": p.Publish, "deny": p.Deny},
			"subscribe": map[string]any{"allow": p.Subscribe},
		}})
	}
	// JSON is a NATS configuration, but for escapes of characters such
	// as >, which it does not take.
	var conf bytes.Buffer
	enc := json.NewEncoder(&conf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(map[string]any{"authorization": map[string]any{"users": users}}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(file, conf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := bus.StartServer(bus.ServerConfig{Host: "127.0.0.1", Port: -1, StoreDir: dir, ConfigFile: file})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	ctx := context.Background()
	connect := func(name string) jetstream.JetStream {
		t.Helper()
		opts := []nats.Option{nats.UserInfo(name, name)}
		if c, ok := creds[name]; ok {
			opts = append(opts, nats.CustomInboxPrefix(c.Inbox()))
		}
		nc, err := bus.Connect(s.ClientURL(), name, slog.New(slog.DiscardHandler), opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return js
	}
	if err := Setup(ctx, connect("admin")); err != nil {
		t.Fatal(err)
	}
	ada, bob, bot := connect("ada"), connect("bob"), connect("bot")

	id := uuid.Must(uuid.NewV7())
	bobs := sessionKey("acme", bus.UserToken("bob"), id.String())
	rec := sessionRecord{ID: id, User: "bob", Environment: "bobs", CreatedAt: time.Now().UTC()}
	if err := writeRecord(ctx, bob, bobs, rec, 0); err != nil {
		t.Fatalf("bob writing his own session: %v", err)
	}
	if err := writeRecord(ctx, ada, sessionKey("acme", bus.UserToken("ada"), uuid.NewString()), sessionRecord{User: "ada"}, 0); err != nil {
		t.Errorf("ada writing her own session: %v", err)
	}
	if err := writeRecord(ctx, ada, recordKey("acme", kindAgent, "agent_1"), agentRecord{ID: "agent_1"}, 0); err != nil {
		t.Errorf("ada writing an agent of the tenant: %v", err)
	}

	// Ada, in the same tenant, reaches none of Bob's.
	forged := rec
	forged.Environment, forged.Repo = "adas", &event.Repo{URL: "https://github.com/ada/evil"}
	if err := writeRecord(ctx, ada, bobs, forged, 1); err == nil {
		t.Error("ada rewrote bob's session record")
	}
	var read sessionRecord
	if _, err := readRecord(ctx, ada, bobs, &read); err == nil {
		t.Errorf("ada read bob's session record: %+v", read)
	}
	if recs, err := listRecords(ctx, ada, sessionKey("acme", bus.UserToken("bob"), "*")); err == nil {
		t.Errorf("ada listed bob's session records: %d", len(recs))
	}
	if recs, err := listRecords(ctx, ada, sessionKey("acme", "*", "*")); err == nil {
		t.Errorf("ada listed every user's session records: %d", len(recs))
	}
	del := nats.NewMsg(recordSubject(bobs))
	del.Header.Set("KV-Operation", "DEL")
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	pctx, stop := bus.WhilePermitted(pctx, ada.Conn(), del.Subject)
	_, err = ada.PublishMsg(pctx, del)
	stop()
	cancel()
	if err == nil {
		t.Error("ada deleted bob's session record")
	}
	if _, err := readRecord(ctx, bob, bobs, &read); err != nil || read.Environment != "bobs" {
		t.Errorf("bob's session record after ada's attempts: %+v, %v", read, err)
	}

	// A bot speaks for any user of the tenant.
	if recs, err := listRecords(ctx, bot, sessionKey("acme", "*", "*")); err != nil || recs[bobs] == nil {
		t.Errorf("a bot listing every user's session records: %v, %v", recs, err)
	}
	if _, err := readRecord(ctx, bot, bobs, &read); err != nil {
		t.Errorf("a bot reading bob's session record: %v", err)
	}
}
