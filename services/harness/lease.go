package harness

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/lease"
)

// A step works on a session only while this harness holds the session's
// lease: the session's key in the leases bucket, naming the harness. The
// lease expires [bus.LeaseTTL] after its last write, so a harness that
// dies holding it blocks the session only that long.
//
// A running session's lease is kept a while after its step (it lingers),
// for as long as it is surely valid without a renewal, half its TTL from
// its last write: the session's next step, which most often comes here
// moments later with its tool's result, then goes on without a round trip
// to the server. A lingering lease is freed when that time runs out, when
// this harness stops, or at once when another harness asks for it (on
// [bus.LeaseSubject] of this harness).

// errLeaseHeld leaves a step to be retried: another harness is working on
// the session.
var errLeaseHeld = fmt.Errorf("session lease held by another harness: %w", bus.ErrNotYet)

// sessionLeases returns the bucket of session leases.
func sessionLeases(kv jetstream.KeyValue) lease.Bucket {
	return lease.Bucket{KV: kv, TTL: bus.LeaseTTL}
}

// acquireLease takes the session's lease and renews it until release is
// called. The returned ctx is cancelled if the lease is lost, so the step
// stops rather than act for a session another harness now owns. release
// keeps the lease lingering if linger is set, and frees it otherwise.
// owned reports that no other harness held the lease since this one last
// did.
func (s *Service) acquireLease(ctx context.Context, tenant string, session uuid.UUID) (_ context.Context, release func(linger bool), owned bool, err error) {
	key := bus.SessionKey(tenant, session)
	me := []byte(s.cfg.Instance)
	rctx, rcancel := bus.Bound(ctx)
	reconnects := s.reconnects()
	l, owned, err := s.holdLease(rctx, key, me)
	rcancel()
	if err != nil {
		return nil, nil, false, err
	}
	ctx, stop := l.Hold(ctx, bus.LeaseTTL/3)
	return ctx, func(linger bool) {
		lost := stop()
		switch {
		case lost != nil:
			s.log.WarnContext(ctx, "lease lost", "session", key, "err", lost)
		case linger:
			s.held.put(key, lingering{l, reconnects})
			if s.stopping.Load() {
				// Stopped meanwhile, after the leases held were freed.
				s.freeHeld(ctx, key)
			}
		default:
			// The step's own ctx may be done; freeing the lease still matters.
			s.freeLease(context.WithoutCancel(ctx), l)
		}
	}, owned, nil
}

// holdLease returns the session's lease: the one lingering here if it is
// surely valid still, or one written now. owned reports that no other
// harness held it since this one last did: the lease lingered here, or
// was written on the revision this harness last wrote.
//
// A lingering lease is surely valid only while this harness's connection
// stayed up since it was taken: while it was down, this harness did not
// answer on its lease subject, and another may have taken the lease for
// a dead harness's (see [Service.takeLease]).
func (s *Service) holdLease(ctx context.Context, key string, me []byte) (_ *lease.Lease, owned bool, _ error) {
	if h, ok := s.held.take(key); ok {
		l := h.l
		if l.Sure() && h.reconnects == s.reconnects() {
			return l, true, nil
		}
		if renewed, err := s.leases.Update(ctx, key, me, l.Rev()); err == nil {
			return renewed, true, nil
		}
	}
	return s.takeLease(ctx, key, me)
}

// freeLease frees a lease this harness holds by writing an empty value
// rather than deleting the key: the next step of the session, most often
// ours, takes it back in one compare-and-set on the revision remembered
// here.
func (s *Service) freeLease(ctx context.Context, l *lease.Lease) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := l.Free(ctx)
	if err != nil {
		s.log.WarnContext(ctx, "release lease", "session", l.Key(), "err", err)
		return
	}
	s.freed.put(l.Key(), r)
}

// takeLease writes me into the lease key if the lease is free: the key is
// missing (never taken, or expired), empty (released), or holds me (left by
// a release that failed). A lease another harness holds is asked of it,
// and taken if it was only lingering there. owned reports that it was
// written on the revision this harness freed it at (no one held it since).
func (s *Service) takeLease(ctx context.Context, key string, me []byte) (_ *lease.Lease, owned bool, _ error) {
	if rev, ok := s.freed.take(key); ok {
		if l, err := s.leases.Update(ctx, key, me, rev); err == nil {
			return l, true, nil
		}
	}
	l, err := s.leases.Create(ctx, key, me)
	if !errors.Is(err, jetstream.ErrKeyExists) {
		if err != nil {
			return nil, false, fmt.Errorf("lease %s: %w", key, err)
		}
		return l, false, nil
	}
	e, err := s.leases.KV.Get(ctx, key)
	if err != nil {
		return nil, false, errLeaseHeld
	}
	if holder := string(e.Value()); holder != "" && holder != s.cfg.Instance {
		switch s.askFree(ctx, holder, key) {
		case holderFreed:
			if e, err = s.leases.KV.Get(ctx, key); err != nil {
				return nil, false, errLeaseHeld
			}
		case holderGone:
			// Taken at once rather than when it expires, unless the
			// holder renewed it meanwhile. A holder that is only cut off
			// from the server finds its lease lost at its next renewal,
			// and stops its step; what it wrote meanwhile is safe to
			// write twice, as every step's writes are.
			l, err := s.leases.Update(ctx, key, me, e.Revision())
			if err != nil {
				return nil, false, errLeaseHeld
			}
			s.log.InfoContext(ctx, "lease taken from a harness that is gone", "session", key, "holder", holder)
			return l, false, nil
		}
	}
	switch string(e.Value()) {
	case "", s.cfg.Instance:
		l, err := s.leases.Update(ctx, key, me, e.Revision())
		if err != nil {
			return nil, false, errLeaseHeld
		}
		return l, false, nil
	}
	// Come back when the holder's lease runs out, should it have died:
	// the entry was written at its last renewal.
	left := bus.LeaseTTL - time.Since(e.Created()) + 50*time.Millisecond
	return nil, false, bus.NotYet(min(max(left, 50*time.Millisecond), s.cfg.RetryDelay), errLeaseHeld)
}

// Answers to a request for a lingering lease.
const (
	leaseFreed = "free"
	leaseBusy  = "busy"
)

// What became of a request for a lease: the holder freed it, keeps it,
// or is gone.
type holderAnswer int

const (
	holderBusy holderAnswer = iota
	holderFreed
	holderGone
)

// askFree asks the harness holding a session's lease to free it if it is
// only lingering there. A harness that is gone answers at once: the server
// knows no one listens on its subject any more (its connection closed when
// it died), which is how a killed harness's sessions move on well before
// their leases expire.
func (s *Service) askFree(ctx context.Context, holder, key string) holderAnswer {
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	m, err := s.js.Conn().RequestWithContext(ctx, bus.LeaseSubject(holder), []byte(key))
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return holderGone
	case err == nil && string(m.Data) == leaseFreed:
		return holderFreed
	}
	return holderBusy
}

// answerLeaseRequests answers other harnesses' requests for the leases
// this one holds, freeing one that only lingers here, until the caller
// unsubscribes: after this harness's last step, since a harness that does
// not answer is taken for gone.
func (s *Service) answerLeaseRequests(ctx context.Context) (*nats.Subscription, error) {
	ctx = context.WithoutCancel(ctx)
	sub, err := s.js.Conn().Subscribe(bus.LeaseSubject(s.cfg.Instance), func(m *nats.Msg) {
		answer := leaseBusy
		if validSessionKey(string(m.Data)) && s.freeLingering(ctx, string(m.Data)) {
			answer = leaseFreed
		}
		_ = m.Respond([]byte(answer))
	})
	if err != nil {
		return nil, fmt.Errorf("answer lease requests: %w", err)
	}
	// Subscribed on the server before the first step may take a lease
	// (a server out of reach has it on reconnection, before any step can
	// write).
	_ = s.js.Conn().FlushTimeout(5 * time.Second)
	return sub, nil
}

// serveLeases frees lingering leases when their time runs out, until ctx
// is done; then it frees them all.
func (s *Service) serveLeases(ctx context.Context) error {
	const tick = bus.LeaseTTL / 10
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			// Steps still finishing free their leases rather than keep them.
			s.stopping.Store(true)
			for _, key := range s.held.keys() {
				s.freeHeld(ctx, key)
			}
			return nil
		case <-t.C:
		}
		// Freed a tick early: by the next tick it might not be valid.
		for _, key := range s.held.due(time.Now().Add(tick)) {
			s.freeLingering(ctx, key)
		}
	}
}

// freeLingering frees the session's lease if it lingers here, and reports
// whether the session is free of this harness: no step of it runs or
// waits here.
func (s *Service) freeLingering(ctx context.Context, key string) bool {
	unlock, ok := s.sessions.TryLock(key)
	if !ok {
		return false
	}
	defer unlock()
	s.freeHeld(ctx, key)
	return true
}

// freeHeld frees the session's lease if it lingers here. A step that
// looks for it meanwhile does not find it, and takes the lease anew.
func (s *Service) freeHeld(ctx context.Context, key string) {
	if h, ok := s.held.take(key); ok {
		s.freeLease(context.WithoutCancel(ctx), h.l)
	}
}

// leaseMap maps sessions to what this harness keeps of their leases; it
// is safe for concurrent use. A map with a max forgets all it holds when
// it reaches it.
type leaseMap[V any] struct {
	mu  sync.Mutex
	m   map[string]V
	max int
}

func (h *leaseMap[V]) put(key string, v V) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil || h.max > 0 && len(h.m) >= h.max {
		h.m = make(map[string]V)
	}
	h.m[key] = v
}

func (h *leaseMap[V]) take(key string) (V, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.m[key]
	delete(h.m, key)
	return v, ok
}

// heldLeases are the leases lingering here, by session.
type heldLeases struct{ leaseMap[lingering] }

// lingering is a lease lingering here, and how many times this harness's
// connection had reconnected when the lease was taken.
type lingering struct {
	l          *lease.Lease
	reconnects uint64
}

// reconnects returns how many times this harness's connection has
// reconnected.
func (s *Service) reconnects() uint64 { return s.js.Conn().Stats().Reconnects }

// due returns the sessions whose leases are not surely valid after t.
func (h *heldLeases) due(t time.Time) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for key, h := range h.m {
		if h.l.SureUntil().Before(t) {
			out = append(out, key)
		}
	}
	return out
}

func (h *heldLeases) keys() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Collect(maps.Keys(h.m))
}

// freedLeases remembers the revision at which this harness released each
// session's lease, so that it can take it back in one round trip. It
// remembers at most [maxFreed] sessions.
type freedLeases = leaseMap[uint64]

// maxFreed bounds the sessions remembered; past it, all are forgotten.
const maxFreed = 16384

// validSessionKey reports whether key is a [bus.SessionKey].
func validSessionKey(key string) bool {
	tenant, id, ok := strings.Cut(key, ".")
	if !ok || event.CheckTenant(tenant) != nil {
		return false
	}
	_, err := uuid.Parse(id)
	return err == nil
}
