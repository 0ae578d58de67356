package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/model"
	"corral.dev/pkg/policy"
	"corral.dev/services/harness/internal/core"
)

// dayUsageFresh is how old a day's usage read for a budget check may be,
// so that a busy harness reads each key once per period, not once per
// step. What this harness's sessions spent since the read is added to it,
// so they cannot overrun a daily budget in between; other harnesses'
// sessions can, by what they spend in that long.
const dayUsageFresh = time.Second

type cachedUsage struct {
	u    policy.Usage
	read time.Time
	// since is what sessions of this harness spent after the read.
	since policy.Usage
}

// recentDayUsage returns a day's usage read at most [dayUsageFresh] ago,
// with what this harness's sessions spent since.
func (s *Service) recentDayUsage(ctx context.Context, key string) (policy.Usage, error) {
	c, ok := s.usageCache.Get(key)
	if ok && time.Since(c.read) < dayUsageFresh {
		c.u.Add(c.since)
		return c.u, nil
	}
	u, _, err := s.dayUsage(ctx, key)
	if err != nil {
		return policy.Usage{}, err
	}
	s.usageMu.Lock()
	s.usageCache.Add(key, cachedUsage{u: u.Usage, read: time.Now()})
	s.usageMu.Unlock()
	return u.Usage, nil
}

// responseUsage is what a model response counts in daily usage.
func (s *Service) responseUsage(modelName string, u model.Usage) policy.Usage {
	return policy.Usage{Steps: 1, InputTokens: int64(u.InputTokens), OutputTokens: int64(u.OutputTokens),
		CostUSD: s.cfg.Policy.Cost(modelName, u)}
}

// spent notes a model response of the session in the usage read for its
// daily budgets.
func (s *Service) spent(st *state, ev *event.ModelResponded) {
	u := s.responseUsage(ev.Model, ev.Usage)
	day := ev.Time.UTC().Format(time.DateOnly)
	s.usageMu.Lock()
	defer s.usageMu.Unlock()
	for _, key := range []string{bus.UsageKey(st.Tenant, day, ""), bus.UsageKey(st.Tenant, day, st.User)} {
		if c, ok := s.usageCache.Get(key); ok {
			c.since.Add(u)
			s.usageCache.Add(key, c)
		}
	}
}

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

// dayUsage is what a key of the usage bucket holds: usage, and the stream
// sequence of the last event counted in it.
type dayUsage struct {
	policy.Usage
	LastSeq uint64 `json:"last_seq"`
}

func (s *Service) dayUsage(ctx context.Context, key string) (dayUsage, uint64, error) {
	var u dayUsage
	rctx, cancel := bus.Bound(ctx)
	defer cancel()
	e, err := s.usage.Get(rctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return u, 0, nil
	}
	if err != nil {
		return u, 0, fmt.Errorf("read usage %s: %w", key, err)
	}
	if err := json.Unmarshal(e.Value(), &u); err != nil {
		return u, 0, fmt.Errorf("read usage %s: %w", key, err)
	}
	return u, e.Revision(), nil
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
