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
)

// sessionUsage is what the session has spent, by its log.
func (s *Service) sessionUsage(st *state) policy.Usage {
	u := policy.Usage{
		Steps:          st.turn,
		InputTokens:    int64(st.usage.InputTokens),
		OutputTokens:   int64(st.usage.OutputTokens),
		SandboxSeconds: float64(st.sandboxMS) / 1000,
	}
	for m, mu := range st.byModel {
		u.CostUSD += s.cfg.Policy.Cost(m, mu)
	}
	return u
}

// overBudget returns the budget the session has used up, as
// <scope>.<limit>, and what it spent against it; "" when it may go on.
// The daily budgets are read from the usage bucket, only when set.
func (s *Service) overBudget(ctx context.Context, st *state, asking bool) (budget, spent string, err error) {
	b := s.cfg.Policy.Budgets(st.tenant)
	b.Session = s.sessionLimits(st, b.Session)
	if !asking {
		b.Session.Steps, b.UserDaily.Steps, b.TenantDaily.Steps = 0, 0, 0
	}
	if limit, spent := b.Session.Over(s.sessionUsage(st), time.Since(st.since)); limit != "" {
		return "session." + limit, spent, nil
	}
	day := time.Now().UTC().Format(time.DateOnly)
	for _, d := range []struct {
		scope string
		l     policy.Limits
		user  string
	}{{"user_daily", b.UserDaily, st.user}, {"tenant_daily", b.TenantDaily, ""}} {
		if d.l == (policy.Limits{}) {
			continue
		}
		u, err := s.recentDayUsage(ctx, bus.UsageKey(st.tenant, day, d.user))
		if err != nil {
			return "", "", err
		}
		if limit, spent := d.l.Over(u, 0); limit != "" {
			return d.scope + "." + limit, spent + " today", nil
		}
	}
	return "", "", nil
}

// sessionLimits returns the session's caps: its tenant's, with each raise
// a reviewer approved applied in turn. A raise counts only on a decision
// that verifies, as for a held call.
func (s *Service) sessionLimits(st *state, l policy.Limits) policy.Limits {
	for _, r := range st.raises {
		d := s.decision(st, r.Raise, event.ArgsHash(event.BudgetTool, r.Limits))
		var raised policy.Limits
		if d != nil && d.Approved && json.Unmarshal(r.Limits, &raised) == nil {
			l = l.Raise(raised)
		}
	}
	return l
}

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
	for _, key := range []string{bus.UsageKey(st.tenant, day, ""), bus.UsageKey(st.tenant, day, st.user)} {
		if c, ok := s.usageCache.Get(key); ok {
			c.since.Add(u)
			s.usageCache.Add(key, c)
		}
	}
}

// budgetCheck stops the session if it is over a budget, and says so;
// asking is whether the model is about to be asked (steps count turns).
func (s *Service) budgetCheck(ctx context.Context, st *state, asking bool) (stopped bool, err error) {
	budget, spent, err := s.overBudget(ctx, st, asking)
	if err != nil || budget == "" {
		return false, err
	}
	return true, s.stopForBudget(ctx, st, budget, spent)
}

// stopForBudget records that the session exceeded budget: the session
// fails with code budget_exceeded, which tells the requester, and the
// sandbox-manager destroys its sandbox.
func (s *Service) stopForBudget(ctx context.Context, st *state, budget, spent string) error {
	ev := event.SessionFailed{
		Header: event.NewHeader(event.TypeSessionFailed, st.tenant, st.session),
		Code:   event.CodeBudget,
		Budget: budget,
		Reason: fmt.Sprintf("the session exceeded its budget %s: it used %s", budget, spent),
	}
	s.log.InfoContext(ctx, "budget exceeded", "session", st.session, "budget", budget, "spent", spent)
	if err := s.append(ctx, st, &ev, fmt.Sprintf("%s:budget:%s", st.session, st.lastRequest)); err != nil {
		return err
	}
	s.metrics.ended.WithLabelValues(event.CodeBudget).Inc()
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
			wall := s.sessionLimits(st, s.cfg.Policy.Budgets(st.tenant).Session).WallTime
			if wall <= 0 || time.Since(st.since) < wall {
				continue
			}
			if err := s.checkWallTime(ctx, st.tenant, st.session); err != nil && ctx.Err() == nil && !errors.Is(err, bus.ErrNotYet) {
				s.log.WarnContext(ctx, "check a session's wall time", "session", st.session, "err", err)
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
		if st.status != statusRunning {
			return nil
		}
		wall := s.sessionLimits(st, s.cfg.Policy.Budgets(st.tenant).Session).WallTime
		elapsed := time.Since(st.since)
		if wall <= 0 || elapsed < wall {
			return nil
		}
		spent := fmt.Sprintf("%s of %s", elapsed.Round(time.Second), wall)
		return s.stopForBudget(ctx, st, "session.wall_time", spent)
	})
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return nil // busy: the step will see to it
	}
	return err
}
