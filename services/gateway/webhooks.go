package gateway

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/envconf"
	"corral.dev/pkg/seal"
	"corral.dev/pkg/webhookapi"
)

// WebhookConfig is how the gateway delivers the tenants' webhooks.
type WebhookConfig struct {
	// AllowPrivate lets webhooks reach loopback, private, link-local and
	// other non-public addresses (CORRAL_WEBHOOK_ALLOW_PRIVATE=on). Off by
	// default: a tenant's webhook would otherwise make the gateway post
	// to the services and metadata endpoints of its own network.
	AllowPrivate bool
	// Timeout bounds each POST (CORRAL_WEBHOOK_TIMEOUT, default 10s).
	Timeout time.Duration
	// MaxAttempts is how many times a message is posted before it is
	// recorded as failed (CORRAL_WEBHOOK_MAX_ATTEMPTS, default 10).
	MaxAttempts int
	// RetryDelay is the wait after a first failed attempt
	// (CORRAL_WEBHOOK_RETRY_DELAY, default 10s); it doubles with each
	// attempt, up to an hour.
	RetryDelay time.Duration
	// Key seals the webhooks' signing secrets in the bucket
	// (CORRAL_GATEWAY_WEBHOOK_KEY, 32 bytes in base64, or
	// CORRAL_GATEWAY_WEBHOOK_KEY_FILE); required. Every gateway of a
	// deployment has the same one, and losing it loses the secrets: the
	// webhooks must then be added again.
	Key []byte
	// Clients is the account the webhook API's requests must come from
	// ([credential.AccountClients] when loaded from the environment);
	// empty takes them from anywhere, for tests on a server without
	// accounts.
	Clients string
}

// loadWebhookConfig reads the webhooks' settings from getenv.
func loadWebhookConfig(getenv func(string) string, clients string) (WebhookConfig, error) {
	c := WebhookConfig{Clients: clients}
	var err error
	if c.Key, err = seal.Load(getenv, "CORRAL_GATEWAY_WEBHOOK_KEY"); err != nil {
		return c, err
	}
	if c.Key == nil {
		return c, errNoWebhookKey
	}
	if c.AllowPrivate, err = envconf.Switch(getenv, "CORRAL_WEBHOOK_ALLOW_PRIVATE", false); err != nil {
		return c, err
	}
	if c.Timeout, err = envconf.Duration(getenv, "CORRAL_WEBHOOK_TIMEOUT", 10*time.Second); err != nil {
		return c, err
	}
	if c.MaxAttempts, err = envconf.Count(getenv, "CORRAL_WEBHOOK_MAX_ATTEMPTS", 10); err != nil {
		return c, err
	}
	if c.RetryDelay, err = envconf.Duration(getenv, "CORRAL_WEBHOOK_RETRY_DELAY", 10*time.Second); err != nil {
		return c, err
	}
	return c, nil
}

// errNoWebhookKey is returned for a gateway given no key for the webhooks'
// secrets.
var errNoWebhookKey = errors.New("CORRAL_GATEWAY_WEBHOOK_KEY (or _FILE) is not set: the gateway seals the webhooks' signing secrets with it (32 random bytes in base64: head -c32 /dev/urandom | base64)")

// withDefaults fills in what c leaves zero.
func (c WebhookConfig) withDefaults() WebhookConfig {
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Second
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 10
	}
	if c.RetryDelay <= 0 {
		c.RetryDelay = 10 * time.Second
	}
	return c
}

// maxWebhooks bounds a tenant's webhooks: each event is posted to each.
const maxWebhooks = 20

// setupWebhooks creates the webhooks' bucket and the stream of their
// deliveries if they are missing (see [Setup]).
func setupWebhooks(ctx context.Context, js jetstream.JetStream) error {
	_, err := js.KeyValue(ctx, bus.BucketWebhooks)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		_, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      bus.BucketWebhooks,
			Description: "the tenants' webhooks and their signing secrets, sealed: <tenant>.<id>; the gateway's alone",
			Storage:     jetstream.FileStorage,
			History:     1,
		})
	}
	if err != nil {
		return fmt.Errorf("kv %s: %w (a NATS user that may not create buckets needs it created first: corral setup)", bus.BucketWebhooks, err)
	}
	// Created if missing, and left as it is otherwise: corral setup
	// --replicas may have given it more copies.
	_, err = js.Stream(ctx, bus.StreamWebhooks)
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		if err != nil {
			return fmt.Errorf("stream %s: %w", bus.StreamWebhooks, err)
		}
		return nil
	}
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{
		Name:        bus.StreamWebhooks,
		Description: "webhook delivery attempts: webhooks.<tenant>.<webhook>.<message>",
		Subjects:    []string{bus.WebhookDeliverySubject("*", "*", "*")},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		MaxAge:      bus.WebhookHistory,
		// Bounded whatever the traffic: the oldest attempts go first.
		MaxBytes:    1 << 30,
		Discard:     jetstream.DiscardOld,
		Duplicates:  10 * time.Minute,
		AllowDirect: true,
	})
	if err != nil {
		return fmt.Errorf("stream %s: %w", bus.StreamWebhooks, err)
	}
	return nil
}

// hookRecord is a webhook as the bucket keeps it: with its signing
// secret sealed with the gateway's key ([WebhookConfig.Key]), the
// record's key in the bucket as additional data, so that a sealed secret
// copied to another webhook's record does not open.
type hookRecord struct {
	webhookapi.Webhook
	Tenant string `json:"tenant"`
	Sealed []byte `json:"sealed,omitempty"`
	// Secret is the signing secret in the clear, as records written
	// before secrets were sealed have it: such a record is read as it is,
	// and sealed when the gateway starts ([webhooks.reseal]).
	Secret string `json:"secret,omitempty"`
}

// key is where h is kept in the bucket.
func (h *hookRecord) key() string { return hookKey(h.Tenant, h.ID) }

// wants reports whether h asks for event typ.
func (h *hookRecord) wants(typ string) bool { return slices.Contains(h.Events, typ) }

// hookKey is webhook id's key of tenant.
func hookKey(tenant, id string) string { return tenant + "." + id }

// hooks are the tenants' webhooks as the bucket holds them, kept up to
// date by a watch, so that an event is matched without a read.
type hooks struct {
	kv    jetstream.KeyValue
	mu    sync.Mutex
	by    map[string]map[string]*hookRecord // tenant -> id -> webhook
	ready chan struct{}
}

func newHooks(kv jetstream.KeyValue) *hooks {
	return &hooks{kv: kv, by: map[string]map[string]*hookRecord{}, ready: make(chan struct{})}
}

// watch keeps h up to date until ctx is done.
func (h *hooks) watch(ctx context.Context) error {
	w, err := h.kv.WatchAll(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while the watch started
		}
		return fmt.Errorf("watch kv %s: %w", bus.BucketWebhooks, err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return nil
			}
			if e == nil {
				close(h.ready)
				continue
			}
			h.apply(e.Key(), e.Operation(), e.Value())
		}
	}
}

// apply takes in one change of the bucket, to key: the key's tenant is
// the record's, whatever its body says.
func (h *hooks) apply(key string, op jetstream.KeyValueOp, value []byte) {
	tenant, id, ok := strings.Cut(key, ".")
	if !ok {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if op != jetstream.KeyValuePut {
		delete(h.by[tenant], id)
		return
	}
	var r hookRecord
	if json.Unmarshal(value, &r) != nil {
		return
	}
	r.Tenant, r.ID = tenant, id
	if h.by[tenant] == nil {
		h.by[tenant] = map[string]*hookRecord{}
	}
	h.by[tenant][id] = &r
}

// of returns tenant's webhooks, oldest first, once the watch has read
// the bucket; ctx bounds the wait.
func (h *hooks) of(ctx context.Context, tenant string) ([]*hookRecord, error) {
	select {
	case <-h.ready:
	case <-ctx.Done():
		return nil, fmt.Errorf("the webhooks are not read yet: %w", ctx.Err())
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*hookRecord, 0, len(h.by[tenant]))
	for _, r := range h.by[tenant] {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b *hookRecord) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

// newSecret returns a fresh signing secret: [webhookapi.SecretPrefix] and
// 32 random bytes in base64.
func newSecret() string {
	key := make([]byte, 32)
	_, _ = rand.Read(key) // never fails (crypto/rand)
	return webhookapi.SecretPrefix + base64.StdEncoding.EncodeToString(key)
}

// secret returns h's signing secret: opened, or as a record written
// before secrets were sealed has it in the clear.
func (w *webhooks) secret(h *hookRecord) (string, error) {
	if h.Sealed == nil {
		if h.Secret == "" {
			return "", fmt.Errorf("webhook %s has no secret", h.ID)
		}
		return h.Secret, nil
	}
	secret, err := w.box.Open(h.Sealed, h.key())
	if err != nil {
		return "", fmt.Errorf("webhook %s: %w (not the CORRAL_GATEWAY_WEBHOOK_KEY it was added with?)", h.ID, err)
	}
	return secret, nil
}

// reseal seals the secrets that records written before secrets were
// sealed keep in the clear. A record changed or removed meanwhile is left
// as it is now; one still in the clear is read as it is, and sealed at
// the next start.
func (w *webhooks) reseal(ctx context.Context) {
	keys, err := w.kv.ListKeys(ctx)
	if err != nil {
		if !errors.Is(err, jetstream.ErrNoKeysFound) && ctx.Err() == nil {
			w.log.WarnContext(ctx, "seal the webhooks' secrets", "err", err)
		}
		return
	}
	n := 0
	for key := range keys.Keys() {
		e, err := w.kv.Get(ctx, key)
		if err != nil {
			continue // removed meanwhile, or worth another start
		}
		var h hookRecord
		tenant, id, ok := strings.Cut(key, ".")
		if !ok || json.Unmarshal(e.Value(), &h) != nil || h.Sealed != nil || h.Secret == "" {
			continue
		}
		h.Tenant, h.ID = tenant, id
		h.Sealed, h.Secret = w.box.Seal(h.Secret, key), ""
		b, err := json.Marshal(h)
		if err != nil {
			continue
		}
		if _, err := w.kv.Update(ctx, key, b, e.Revision()); err != nil {
			if ctx.Err() == nil {
				w.log.WarnContext(ctx, "seal a webhook's secret", "tenant", tenant, "webhook", id, "err", err)
			}
			continue
		}
		n++
	}
	if n > 0 {
		w.log.InfoContext(ctx, "webhooks' secrets sealed", "webhooks", n)
	}
}
