package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/sessionindex"
)

// index is the session index (kept by the gateway in [bus.BucketSessions])
// as last watched: what the sessions console lists, and what wakes its
// live list.
type index struct {
	kv jetstream.KeyValue

	mu      sync.Mutex
	entries map[string]sessionindex.Entry
	// changed is closed and replaced on every change; synced is closed
	// once the initial values are in.
	changed chan struct{}
	synced  chan struct{}
}

// openIndex returns the index of js's server, or nil when it has none.
func openIndex(ctx context.Context, js jetstream.JetStream) (*index, error) {
	kv, err := js.KeyValue(ctx, bus.BucketSessions)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open kv %s: %w", bus.BucketSessions, err)
	}
	return &index{kv: kv, entries: make(map[string]sessionindex.Entry), changed: make(chan struct{}), synced: make(chan struct{})}, nil
}

// watch keeps the entries in step with the bucket until ctx is done.
func (x *index) watch(ctx context.Context, log *slog.Logger) error {
	for ctx.Err() == nil {
		w, err := x.kv.WatchAll(ctx)
		if err != nil {
			log.WarnContext(ctx, "watch the session index", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		for e := range w.Updates() {
			x.apply(e)
		}
		_ = w.Stop()
	}
	return nil
}

// apply takes one update of the watch (nil: the initial values are in).
func (x *index) apply(e jetstream.KeyValueEntry) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if e == nil {
		select {
		case <-x.synced:
		default:
			close(x.synced)
		}
		return
	}
	entry, ok := decodeEntry(e.Key(), e.Value())
	if e.Operation() == jetstream.KeyValuePut && ok {
		x.entries[e.Key()] = entry
	} else {
		delete(x.entries, e.Key())
	}
	close(x.changed)
	x.changed = make(chan struct{})
}

// decodeEntry returns the entry kept under key, its tenant and session
// the key's, never what its body says; false for one that is not an
// entry.
func decodeEntry(key string, value []byte) (sessionindex.Entry, bool) {
	tenant, id, ok := strings.Cut(key, ".")
	session, err := uuid.Parse(id)
	if !ok || err != nil || session.String() != id {
		return sessionindex.Entry{}, false
	}
	var e sessionindex.Entry
	if json.Unmarshal(value, &e) != nil {
		return sessionindex.Entry{}, false
	}
	e.Tenant, e.Session = tenant, session
	return e, true
}

// list returns the entries keep keeps, the latest first.
func (x *index) list(keep func(sessionindex.Entry) bool) []sessionindex.Entry {
	<-x.synced
	x.mu.Lock()
	var out []sessionindex.Entry
	for _, e := range x.entries {
		if keep(e) {
			out = append(out, e)
		}
	}
	x.mu.Unlock()
	sessionindex.SortRecent(out)
	return out
}

// get returns a session's entry, and false when the index has none (yet).
func (x *index) get(tenant string, session uuid.UUID) (sessionindex.Entry, bool) {
	<-x.synced
	x.mu.Lock()
	defer x.mu.Unlock()
	e, ok := x.entries[sessionindex.Key(tenant, session)]
	return e, ok
}

// updates returns a channel closed at the next change of the index.
func (x *index) updates() <-chan struct{} {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.changed
}
