package harness

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/services/harness/internal/core"
)

// stopForBudget records that the session exceeded a budget: the session
// fails with code budget_exceeded, which tells the requester, and the
// sandbox-manager destroys its sandbox.
func (s *Service) stopForBudget(ctx context.Context, st *state, f core.Fail) error {
	ev := event.SessionFailed{
		Header: event.NewHeader(event.TypeSessionFailed, st.Tenant, st.Session),
		Code:   f.Code,
		Budget: f.Budget,
		Reason: f.Reason,
	}
	s.log.InfoContext(ctx, "budget exceeded", "session", st.Session, "budget", f.Budget, "reason", f.Reason)
	if err := s.append(ctx, st, &ev, fmt.Sprintf("%s:budget:%s", st.Session, st.LastRequest)); err != nil {
		return err
	}
	s.metrics.ended.WithLabelValues(f.Code).Inc()
	return nil
}

// watchWallTime stops the sessions this process has worked on that have
// run past their wall-time budget while waiting (for a tool call, say, or
// a reviewer): no step comes to check them until then. A candidate is
// checked again under its lock and lease, from its log, before it is
// stopped: the cached state may be out of date.
func (s *Service) watchWallTime(ctx context.Context) error {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		for _, st := range s.folded.running() {
			env := core.Env{Policy: s.cfg.Policy, ApprovalKey: s.cfg.ApprovalKey, Now: time.Now()}
			if core.OverWallTime(st.State, env) == nil {
				continue
			}
			if err := s.checkWallTime(ctx, st.Tenant, st.Session); err != nil && ctx.Err() == nil && !errors.Is(err, bus.ErrNotYet) {
				s.log.WarnContext(ctx, "check a session's wall time", "session", st.Session, "err", err)
			}
		}
	}
}

func (s *Service) checkWallTime(ctx context.Context, tenant string, session uuid.UUID) error {
	// A step under way checks the budget itself; don't wait for it.
	tryLock := func(ctx context.Context, key string) (func(), error) {
		lctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		return s.sessions.Lock(lctx, key)
	}
	err := s.withSession(ctx, tryLock, tenant, session, func(ctx context.Context, st *state) error {
		f := core.OverWallTime(st.State, core.Env{Policy: s.cfg.Policy, ApprovalKey: s.cfg.ApprovalKey, Now: time.Now()})
		if f == nil {
			return nil
		}
		return s.stopForBudget(ctx, st, *f)
	})
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return nil // busy: the step will see to it
	}
	return err
}
