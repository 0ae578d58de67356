package harness

import (
	"context"
	"errors"
	"fmt"
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
	rev, err := s.leases.Create(rctx, key, me)
	if errors.Is(err, jetstream.ErrKeyExists) {
		e, gerr := s.leases.Get(rctx, key)
		if gerr != nil {
			return nil, nil, errLeaseHeld
		}
		if string(e.Value()) != s.cfg.Instance {
			// Come back when the holder's lease runs out, should it have
			// died: the entry was written at its last renewal.
			left := bus.LeaseTTL - time.Since(e.Created()) + 50*time.Millisecond
			return nil, nil, bus.NotYet(min(max(left, 50*time.Millisecond), s.cfg.RetryDelay), errLeaseHeld)
		}
		rev, err = e.Revision(), nil // ours, left by a release that failed
	}
	if err != nil {
		return nil, nil, fmt.Errorf("lease %s: %w", key, err)
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
		// The step's own ctx may be done; deleting the lease still matters.
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer dcancel()
		if err := s.leases.Delete(dctx, key, jetstream.LastRevision(rev)); err != nil {
			s.log.WarnContext(dctx, "release lease", "session", key, "err", err)
		}
	}, nil
}
