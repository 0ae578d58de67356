package gateway

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/logtest"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/seal"
	"corral.dev/pkg/webhookapi"
)

// rawHook returns webhook id of tenant as the bucket holds it.
func rawHook(t *testing.T, js jetstream.JetStream, tenant, id string) jetstream.KeyValueEntry {
	t.Helper()
	kv, err := js.KeyValue(context.Background(), bus.BucketWebhooks)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(context.Background(), hookKey(tenant, id))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// testHook has the gateway post a test event to webhook h of tenant, and
// returns its one attempt.
func testHook(t *testing.T, js jetstream.JetStream, tenant string, h *webhookapi.Webhook) webhookapi.Delivery {
	t.Helper()
	ds := webhookAPI(t, js, tenant, webhookapi.OpTest, webhookapi.Request{ID: h.ID}).Deliveries
	if len(ds) != 1 {
		t.Fatalf("test of %s: %+v, want one attempt", h.ID, ds)
	}
	return ds[0]
}

// TestWebhookSecretKeptSealed adds a webhook through the API: the bucket
// keeps its secret sealed, no later answer and no log line has it, and
// the POSTs verify with the secret the API answered once.
func TestWebhookSecretKeptSealed(t *testing.T) {
	t.Parallel()
	log := &logtest.Buffer{}
	js, harness, start := webhookGatewayLog(t, WebhookConfig{RetryDelay: 50 * time.Millisecond, MaxAttempts: 3}, log)
	start()
	r := newReceiver(t, ok)
	h := addHook(t, js, "acme", r, webhookapi.EventIdle)
	secret := r.secret
	key := strings.TrimPrefix(secret, webhookapi.SecretPrefix)

	raw := rawHook(t, js, "acme", h.ID).Value()
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte(key)) || fields["secret"] != nil || fields["sealed"] == nil {
		t.Errorf("the bucket keeps %s, want the secret sealed and not in the clear", raw)
	}
	list := natstest.Request(t, js.Conn(), webhookapi.TenantSubject("acme", webhookapi.OpList), []byte("{}"))
	if !bytes.Contains(list.Data, []byte(h.ID)) || bytes.Contains(list.Data, []byte(key)) {
		t.Errorf("the list answered %s: want the webhook, without its secret", list.Data)
	}

	session := uuid.Must(uuid.NewV7())
	record(t, harness, &event.SessionCompleted{Header: event.NewHeader(event.TypeSessionCompleted, "acme", session), Answer: "ok"})
	natstest.WaitFor(t, 10*time.Second, func() error {
		if n := len(r.posts()); n != 1 {
			return fmt.Errorf("%d POSTs, want 1", n)
		}
		return nil
	})
	if d := testHook(t, js, "acme", h); d.Outcome != webhookapi.Delivered {
		t.Errorf("test: %+v, want delivered", d)
	}
	for _, p := range r.posts() {
		if !p.sigOK {
			t.Errorf("POST %s does not verify with the secret the API answered", p.id)
		}
	}
	if strings.Contains(log.String(), key) {
		t.Errorf("the gateway logged the secret:\n%s", log)
	}
}

// TestWebhookSealedSecretMovedDoesNotOpen copies one webhook's sealed
// secret into another's record: it does not open there, and the other
// webhook is posted nothing signed with the first one's secret.
func TestWebhookSealedSecretMovedDoesNotOpen(t *testing.T) {
	t.Parallel()
	js, _, start := webhookGateway(t, WebhookConfig{RetryDelay: 50 * time.Millisecond, MaxAttempts: 3})
	start()
	ra, rb := newReceiver(t, ok), newReceiver(t, ok)
	ha := addHook(t, js, "acme", ra, webhookapi.EventIdle)
	hb := addHook(t, js, "acme", rb, webhookapi.EventIdle)
	rb.mu.Lock()
	rb.secret = ra.secret // what rb would verify with, had the copy opened
	rb.mu.Unlock()

	var a, b map[string]json.RawMessage
	if err := json.Unmarshal(rawHook(t, js, "acme", ha.ID).Value(), &a); err != nil {
		t.Fatal(err)
	}
	eb := rawHook(t, js, "acme", hb.ID)
	if err := json.Unmarshal(eb.Value(), &b); err != nil {
		t.Fatal(err)
	}
	if a["sealed"] == nil {
		t.Fatalf("no sealed secret in %s", a)
	}
	b["sealed"] = a["sealed"]
	moved, _ := json.Marshal(b)
	kv, err := js.KeyValue(context.Background(), bus.BucketWebhooks)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Update(context.Background(), hookKey("acme", hb.ID), moved, eb.Revision()); err != nil {
		t.Fatal(err)
	}

	if d := testHook(t, js, "acme", hb); d.Outcome != webhookapi.Failed || !strings.Contains(d.Error, "does not open") {
		t.Errorf("test of the webhook with a moved secret: %+v, want failed, the secret not opening", d)
	}
	if got := rb.posts(); len(got) != 0 {
		t.Errorf("the webhook with a moved secret was posted %d times", len(got))
	}
	if d := testHook(t, js, "acme", ha); d.Outcome != webhookapi.Delivered || len(ra.posts()) != 1 || !ra.posts()[0].sigOK {
		t.Errorf("test of the webhook the secret is from: %+v, want delivered and verified", d)
	}
}

// TestWebhookClearSecretReadAndSealed starts a gateway over a record
// written before secrets were sealed, its secret in the clear: it is
// delivered with that secret, and sealed in the bucket.
func TestWebhookClearSecretReadAndSealed(t *testing.T) {
	t.Parallel()
	js, harness, start := webhookGateway(t, WebhookConfig{RetryDelay: 50 * time.Millisecond, MaxAttempts: 3})
	r := newReceiver(t, ok)
	r.secret = newSecret()
	h := webhookapi.Webhook{ID: "wh_" + strings.ReplaceAll(uuid.NewString(), "-", ""), URL: r.URL + "/hook", Events: []string{webhookapi.EventIdle}, CreatedAt: time.Now().Add(-time.Minute).UTC()}
	old, _ := json.Marshal(map[string]any{"id": h.ID, "url": h.URL, "events": h.Events, "created_at": h.CreatedAt, "tenant": "acme", "secret": r.secret})
	kv, err := js.KeyValue(context.Background(), bus.BucketWebhooks)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(context.Background(), hookKey("acme", h.ID), old); err != nil {
		t.Fatal(err)
	}
	start()
	// Events from the consumer's start on are announced.
	natstest.WaitFor(t, 10*time.Second, func() error {
		_, err := js.Consumer(context.Background(), bus.StreamEvents, bus.ConsumerGatewayWebhooks)
		return err
	})

	record(t, harness, &event.SessionCompleted{Header: event.NewHeader(event.TypeSessionCompleted, "acme", uuid.Must(uuid.NewV7())), Answer: "ok"})
	natstest.WaitFor(t, 10*time.Second, func() error {
		if n := len(r.posts()); n != 1 {
			return fmt.Errorf("%d POSTs, want 1", n)
		}
		return nil
	})
	key := strings.TrimPrefix(r.secret, webhookapi.SecretPrefix)
	natstest.WaitFor(t, 10*time.Second, func() error {
		if raw := rawHook(t, js, "acme", h.ID).Value(); bytes.Contains(raw, []byte(key)) || !bytes.Contains(raw, []byte(`"sealed"`)) {
			return fmt.Errorf("the bucket keeps %s, want the secret sealed", raw)
		}
		return nil
	})
	if d := testHook(t, js, "acme", &h); d.Outcome != webhookapi.Delivered {
		t.Errorf("test once sealed: %+v, want delivered", d)
	}
	for _, p := range r.posts() {
		if !p.sigOK {
			t.Errorf("POST %s does not verify with the record's secret", p.id)
		}
	}
}

// TestWebhookKeyRequired loads the gateway's configuration: without a
// webhook key it is refused, naming the variable; the key is read from
// the variable or its file.
func TestWebhookKeyRequired(t *testing.T) {
	t.Parallel()
	key := seal.NewKey()
	file := filepath.Join(t.TempDir(), "webhook.key")
	if err := os.WriteFile(file, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, env, value, wantErr string
	}{
		{name: "none", wantErr: "CORRAL_GATEWAY_WEBHOOK_KEY (or _FILE) is not set"},
		{name: "short", env: "CORRAL_GATEWAY_WEBHOOK_KEY", value: "c2hvcnQ=", wantErr: "CORRAL_GATEWAY_WEBHOOK_KEY: want 32 bytes"},
		{name: "value", env: "CORRAL_GATEWAY_WEBHOOK_KEY", value: key},
		{name: "file", env: "CORRAL_GATEWAY_WEBHOOK_KEY_FILE", value: file},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := LoadConfig(func(k string) string {
				if k == tc.env {
					return tc.value
				}
				return ""
			})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("err %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || base64.StdEncoding.EncodeToString(cfg.Webhooks.Key) != key {
				t.Errorf("key %x %v, want %s", cfg.Webhooks.Key, err, key)
			}
		})
	}
}
