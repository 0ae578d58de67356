package sessionindex

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
)

// Stream is the index bucket's stream.
const Stream = "KV_" + bus.BucketSessions

// prefix is the subject prefix of the bucket's keys.
const prefix = "$KV." + bus.BucketSessions + "."

// ErrNoIndex is returned when the server has no index: no gateway was ever
// set up there (corral setup makes its bucket).
var ErrNoIndex = errors.New("no session index on this server (corral setup makes it; the gateway keeps it)")

// Get returns tenant's session's entry, and false when the index has none
// (yet): read by a direct get of its key, which a client of the tenant may
// make.
func Get(ctx context.Context, js jetstream.JetStream, tenant string, session uuid.UUID) (Entry, bool, error) {
	m, err := bus.LastBySubject(ctx, js, Stream, prefix+Key(tenant, session))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return Entry{}, false, nil
	case errors.Is(err, nats.ErrNoResponders):
		return Entry{}, false, ErrNoIndex
	case err != nil:
		return Entry{}, false, err
	}
	e, ok, err := decode(tenant, m)
	return e, ok, err
}

// AnyTenant, given to [List] for a tenant, lists the sessions of every
// tenant the reader may read: an operator's credential, whose tenant it
// is, reads them all.
const AnyTenant = "*"

// List returns every entry of tenant's sessions (of every tenant the
// reader may read, for [AnyTenant]), read through a consumer filtered to
// the tenant's keys, as a client of the tenant may.
func List(ctx context.Context, js jetstream.JetStream, tenant string) ([]Entry, error) {
	msgs, err := bus.ReadByConsumer(ctx, js, Stream, prefix+tenant+".>", 0)
	if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, ErrNoIndex
	}
	if err != nil {
		return nil, err
	}
	latest := make(map[string]bus.Msg)
	for _, m := range msgs {
		latest[m.Subject] = m
	}
	var out []Entry
	for _, m := range latest {
		e, ok, err := decode(tenant, m)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, e)
		}
	}
	SortRecent(out)
	return out, nil
}

// decode returns the entry m holds, with its tenant and session those its
// subject names (a tenant's name, tenant unless that is [AnyTenant]);
// false for a deleted key.
func decode(tenant string, m bus.Msg) (Entry, bool, error) {
	if len(m.Data) == 0 {
		return Entry{}, false, nil
	}
	key := strings.TrimPrefix(m.Subject, prefix)
	t, id, ok := strings.Cut(key, ".")
	session, err := uuid.Parse(id)
	if !ok || (t != tenant && (tenant != AnyTenant || event.CheckTenant(t) != nil)) || err != nil || session.String() != id {
		return Entry{}, false, fmt.Errorf("session index: key %q is not %s.<session>", key, tenant)
	}
	var e Entry
	if err := json.Unmarshal(m.Data, &e); err != nil {
		return Entry{}, false, fmt.Errorf("session index: %s: %w", key, err)
	}
	e.Tenant, e.Session = t, session
	return e, true, nil
}

// SortRecent sorts entries by their last event, the latest first.
func SortRecent(entries []Entry) {
	slices.SortFunc(entries, func(a, b Entry) int {
		if c := b.LastEvent.Compare(a.LastEvent); c != 0 {
			return c
		}
		return strings.Compare(a.Session.String(), b.Session.String())
	})
}

// Filter is what [Select] keeps: entries of User (any when empty), of one of
// Statuses (any when none), whose last event is at or after Since (any when
// zero), at most Limit of them (all when zero).
type Filter struct {
	User     string
	Statuses []Status
	Since    time.Time
	Limit    int
}

// Select returns the entries of sorted (see [SortRecent]) that f keeps, in
// their order.
func Select(sorted []Entry, f Filter) []Entry {
	var out []Entry
	for _, e := range sorted {
		if f.Limit > 0 && len(out) == f.Limit {
			break
		}
		if (f.User == "" || e.User == f.User) && (len(f.Statuses) == 0 || slices.Contains(f.Statuses, e.Status)) &&
			(f.Since.IsZero() || !e.LastEvent.Before(f.Since)) {
			out = append(out, e)
		}
	}
	return out
}

// CheckStatus returns s as a [Status], or an error naming the statuses.
func CheckStatus(s string) (Status, error) {
	if slices.Contains(Statuses(), Status(s)) {
		return Status(s), nil
	}
	names := make([]string, 0, len(Statuses()))
	for _, st := range Statuses() {
		names = append(names, string(st))
	}
	return "", fmt.Errorf("status %q: want one of %s", s, strings.Join(names, ", "))
}
