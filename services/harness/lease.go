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
var errLeaseHeld = errors.New("session lease held by another harness")

type sessionLock struct {
	ch   chan struct{}
	refs int
}

// lockSession serialises this process's steps of one session, so that only
// one of them holds (and renews) the session's lease at a time.
func (s *Service) lockSession(id uuid.UUID) (unlock func()) {
	key := id.String()
	s.mu.Lock()
	l := s.locks[key]
	if l == nil {
		l = &sessionLock{ch: make(chan struct{}, 1)}
		s.locks[key] = l
	}
	l.refs++
	s.mu.Unlock()
	l.ch <- struct{}{}
	return func() {
		<-l.ch
		s.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(s.locks, key)
		}
		s.mu.Unlock()
	}
}

// acquireLease takes the session's lease in the leases bucket and renews it
// until release is called. The lease expires [bus.LeaseTTL] after its last
// renewal, so a harness that dies holding it blocks the session only that
// long.
func (s *Service) acquireLease(ctx context.Context, id uuid.UUID) (release func(), err error) {
	key := id.String()
	me := []byte(s.cfg.Instance)
	rev, err := s.leases.Create(ctx, key, me)
	if errors.Is(err, jetstream.ErrKeyExists) {
		e, gerr := s.leases.Get(ctx, key)
		if gerr != nil || string(e.Value()) != s.cfg.Instance {
			return nil, errLeaseHeld
		}
		rev, err = e.Revision(), nil // ours, left by a release that failed
	}
	if err != nil {
		return nil, fmt.Errorf("lease %s: %w", key, err)
	}
	ctx, cancel := context.WithCancel(ctx)
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
				r, err := s.leases.Update(ctx, key, me, rev)
				if err != nil {
					s.log.WarnContext(ctx, "renew lease", "session", key, "err", err)
					continue
				}
				rev = r
			}
		}
	}()
	return func() {
		cancel()
		<-done
		// The step's own ctx may be done; deleting the lease still matters.
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer dcancel()
		if err := s.leases.Delete(dctx, key, jetstream.LastRevision(rev)); err != nil {
			s.log.WarnContext(dctx, "release lease", "session", key, "err", err)
		}
	}, nil
}
