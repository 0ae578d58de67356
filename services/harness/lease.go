package harness

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
)

// errLeaseHeld leaves a step to be retried: another harness is working on
// the session.
var errLeaseHeld = fmt.Errorf("session lease held by another harness: %w", bus.ErrNotYet)

// acquireLease takes the session's lease in the leases bucket and renews it
// until release is called. The lease expires [bus.LeaseTTL] after its last
// renewal, so a harness that dies holding it blocks the session only that
// long. The returned ctx is cancelled if the lease is lost, so the step
// stops rather than act for a session another harness now owns.
func (s *Service) acquireLease(ctx context.Context, id uuid.UUID) (_ context.Context, release func(), err error) {
	key := id.String()
	me := []byte(s.cfg.Instance)
	rctx, rcancel := bus.Bound(ctx)
	defer rcancel()
	rev, err := s.takeLease(rctx, key, me)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(bus.LeaseTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				// A renewal slower than the lease's TTL has failed anyway.
				rctx, rcancel := context.WithTimeout(ctx, bus.LeaseTTL/3)
				r, err := s.leases.Update(rctx, key, me, rev)
				rcancel()
				if err == nil {
					rev = r
					continue
				}
				// The update may have been applied and only its answer lost:
				// the lease is still ours if it says so.
				rctx, rcancel = context.WithTimeout(ctx, bus.LeaseTTL/3)
				e, gerr := s.leases.Get(rctx, key)
				rcancel()
				if gerr == nil && string(e.Value()) == s.cfg.Instance {
					rev = e.Revision()
					continue
				}
				s.log.WarnContext(ctx, "lease lost", "session", key, "err", err)
				cancel(fmt.Errorf("lease of session %s lost: %w", key, err))
				return
			}
		}
	}()
	return ctx, func() {
		cancel(nil)
		<-done
		// The step's own ctx may be done; freeing the lease still matters.
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer dcancel()
		// Freed by writing an empty value rather than deleting the key: the
		// next step of the session, most often ours, takes it back in one
		// compare-and-set on the revision remembered here.
		r, err := s.leases.Update(dctx, key, nil, rev)
		if err != nil {
			s.log.WarnContext(dctx, "release lease", "session", key, "err", err)
			return
		}
		s.freed.put(key, r)
	}, nil
}

// takeLease writes me into the lease key if the lease is free: the key is
// missing (never taken, or expired), empty (released), or holds me (left by
// a release that failed). It returns the revision written.
func (s *Service) takeLease(ctx context.Context, key string, me []byte) (uint64, error) {
	if rev, ok := s.freed.take(key); ok {
		if r, err := s.leases.Update(ctx, key, me, rev); err == nil {
			return r, nil
		}
	}
	rev, err := s.leases.Create(ctx, key, me)
	if !errors.Is(err, jetstream.ErrKeyExists) {
		if err != nil {
			return 0, fmt.Errorf("lease %s: %w", key, err)
		}
		return rev, nil
	}
	e, err := s.leases.Get(ctx, key)
	if err != nil {
		return 0, errLeaseHeld
	}
	switch string(e.Value()) {
	case "", s.cfg.Instance:
		r, err := s.leases.Update(ctx, key, me, e.Revision())
		if err != nil {
			return 0, errLeaseHeld
		}
		return r, nil
	}
	// Come back when the holder's lease runs out, should it have died:
	// the entry was written at its last renewal.
	left := bus.LeaseTTL - time.Since(e.Created()) + 50*time.Millisecond
	return 0, bus.NotYet(min(max(left, 50*time.Millisecond), s.cfg.RetryDelay), errLeaseHeld)
}

// freedLeases remembers the revision at which this harness released each
// session's lease, so that it can take it back in one round trip.
type freedLeases struct {
	mu   sync.Mutex
	revs map[string]uint64
}

// maxFreed bounds the sessions remembered; past it, all are forgotten.
const maxFreed = 16384

func (f *freedLeases) put(key string, rev uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.revs == nil || len(f.revs) >= maxFreed {
		f.revs = make(map[string]uint64)
	}
	f.revs[key] = rev
}

func (f *freedLeases) take(key string) (uint64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rev, ok := f.revs[key]
	delete(f.revs, key)
	return rev, ok
}
