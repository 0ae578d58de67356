package slackbridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
)

// Bucket is the KV bucket where the bridge keeps its threads: which
// session each Slack thread is, what of the session's log it has posted,
// and the messages it may still change. Each thread is under its tenant,
// <tenant>.thread.<session>, and the bridge reads and writes a tenant's
// threads signed in with that tenant's credential, whose permissions name
// that tenant's keys alone.
const Bucket = bus.BucketSlack

// bucketStream is the bucket's stream.
const bucketStream = "KV_" + Bucket

// Setup creates the bridge's KV bucket if it is missing, and returns it:
// an administrator's work (corral setup; corral dev), as the bridge's
// credentials may not create streams. Its stream allows no roll-up, which
// would let a publish on one tenant's key purge every other key, and
// allows per-message TTLs, which the claims of slash commands carry. Threads
// kept by a bridge of before tenants' keys (thread.<tenant>.<session>) are
// moved under their tenant.
func Setup(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      Bucket,
			Description: "the Slack bridge's threads: session, what was posted, messages with buttons",
			TTL:         threadTTL,
			Storage:     jetstream.FileStorage,
			History:     1,
		})
	}
	if err != nil {
		return nil, fmt.Errorf("kv %s: %w (a NATS user that may not create buckets needs it created first: corral setup)", Bucket, err)
	}
	st, err := js.Stream(ctx, bucketStream)
	if err != nil {
		return nil, fmt.Errorf("kv %s: %w", Bucket, err)
	}
	if cfg := st.CachedInfo().Config; cfg.AllowRollup || !cfg.AllowMsgTTL {
		cfg.AllowRollup = false
		cfg.AllowMsgTTL = true // slash commands' claims expire on their own
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			return nil, fmt.Errorf("kv %s: allow no roll-up, and per-message TTLs: %w", Bucket, err)
		}
	}
	if err := moveThreads(ctx, kv); err != nil {
		return nil, err
	}
	return kv, nil
}

// moveThreads moves the threads kept under thread.<tenant>.<session> to
// <tenant>.thread.<session>.
func moveThreads(ctx context.Context, kv jetstream.KeyValue) error {
	keys, err := kv.ListKeysFiltered(ctx, "thread.*.*")
	if err != nil {
		return fmt.Errorf("kv %s: list old threads: %w", Bucket, err)
	}
	var old []string
	for k := range keys.Keys() {
		old = append(old, k)
	}
	for _, k := range old {
		tok := strings.Split(k, ".")
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("kv %s: move %s: %w", Bucket, k, err)
		}
		if _, err := kv.Create(ctx, tok[1]+".thread."+tok[2], e.Value()); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("kv %s: move %s: %w", Bucket, k, err)
		}
		if err := kv.Delete(ctx, k); err != nil {
			return fmt.Errorf("kv %s: move %s: %w", Bucket, k, err)
		}
	}
	return nil
}

// threadKey is the key of session r's thread.
func threadKey(r sessionRef) string { return r.Tenant + ".thread." + r.ID.String() }

// keySubject is the subject of key in [Bucket].
func keySubject(key string) string { return "$KV." + Bucket + "." + key }

// store reads and changes threads in [Bucket], each through the
// connection of its tenant, as a client's credential may: a direct get of
// a key, a publish on it that expects its last revision (a
// compare-and-set), and a consumer whose one filter is the tenant's
// threads. A client may not look up the bucket's stream.
type store struct {
	js map[string]jetstream.JetStream
}

// errNoThread is returned for a session that is no Slack thread.
var errNoThread = errors.New("no such thread")

func (s store) conn(tenant string) (jetstream.JetStream, error) {
	js, ok := s.js[tenant]
	if !ok {
		return nil, fmt.Errorf("tenant %s is none of the bridge's", tenant)
	}
	return js, nil
}

// check reads tenant's keys, to fail at start when the bucket is missing
// or the tenant's credential may not read them.
func (s store) check(ctx context.Context, tenant string) error {
	js, err := s.conn(tenant)
	if err != nil {
		return err
	}
	_, err = bus.LastBySubject(ctx, js, bucketStream, keySubject(tenant+".>"))
	switch {
	case err == nil, errors.Is(err, jetstream.ErrMsgNotFound):
		return nil
	case errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("kv %s is missing: an administrator sets it up (corral setup)", Bucket)
	default:
		return fmt.Errorf("tenant %s: read kv %s: %w", tenant, Bucket, err)
	}
}

// get returns the thread of session r and its revision. A thread deleted
// is errNoThread with the revision of its deletion, on which it may be
// made again.
func (s store) get(ctx context.Context, r sessionRef) (*thread, uint64, error) {
	js, err := s.conn(r.Tenant)
	if err != nil {
		return nil, 0, err
	}
	m, err := bus.LastBySubject(ctx, js, bucketStream, keySubject(threadKey(r)))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, 0, errNoThread
	}
	if err != nil {
		return nil, 0, fmt.Errorf("thread %s: %w", r.key(), err)
	}
	if len(m.Data) == 0 {
		return nil, m.StreamSeq, errNoThread
	}
	var t thread
	if err := json.Unmarshal(m.Data, &t); err != nil {
		return nil, 0, fmt.Errorf("thread %s: %w", r.key(), err)
	}
	return &t, m.StreamSeq, nil
}

// update applies fn to the thread of session r and stores it, retrying
// when it changed in between. With init, a missing thread is made by init
// and then changed by fn; without, it is errNoThread.
func (s store) update(ctx context.Context, r sessionRef, init func() (*thread, error), fn func(t *thread)) (*thread, error) {
	js, err := s.conn(r.Tenant)
	if err != nil {
		return nil, err
	}
	for {
		t, rev, err := s.get(ctx, r)
		if errors.Is(err, errNoThread) && init != nil {
			if t, err = init(); err != nil {
				return nil, err
			}
		} else if err != nil {
			return nil, err
		}
		fn(t)
		data, err := json.Marshal(t)
		if err != nil {
			return nil, err
		}
		pctx, cancel := bus.Bound(ctx)
		_, err = js.Publish(pctx, keySubject(threadKey(r)), data, jetstream.WithExpectLastSequencePerSubject(rev))
		cancel()
		if bus.Conflict(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("store thread %s: %w", r.key(), err)
		}
		return t, nil
	}
}

// open returns the sessions of tenant's threads that are open.
func (s store) open(ctx context.Context, tenant string) ([]sessionRef, error) {
	js, err := s.conn(tenant)
	if err != nil {
		return nil, err
	}
	prefix := keySubject(tenant + ".thread.")
	msgs, err := bus.ReadByConsumer(ctx, js, bucketStream, prefix+"*", 0)
	if err != nil {
		return nil, fmt.Errorf("list threads: %w", err)
	}
	var out []sessionRef
	now := time.Now()
	for _, m := range msgs {
		id, err := uuid.Parse(strings.TrimPrefix(m.Subject, prefix))
		if err != nil || len(m.Data) == 0 {
			continue
		}
		var t thread
		if json.Unmarshal(m.Data, &t) == nil && t.open(now) {
			out = append(out, sessionRef{Tenant: tenant, ID: id})
		}
	}
	return out, nil
}
