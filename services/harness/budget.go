package harness

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"al.essio.dev/pkg/shellescape"
	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/services/harness/internal/core"
)

// failOverBudget records that the session exceeded its tenant's daily
// budget: the session fails with code budget_exceeded, which tells the
// requester, and the sandbox-manager destroys its sandbox.
func (s *Service) failOverBudget(ctx context.Context, st *state, f core.Fail) error {
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

// pause records that the session went over a budget and waits, saying
// what lets it go on: it keeps its conversation, its pending calls and
// its sandbox. Each pause is recorded once: its ID counts the pauses
// before it.
func (s *Service) pause(ctx context.Context, st *state, p core.Pause) error {
	ev := event.SessionPaused{
		Header: event.NewHeader(event.TypeSessionPaused, st.Tenant, st.Session),
		Budget: p.Budget,
		Reason: p.Reason,
		Usage: event.BudgetUsage{
			Steps:          p.Usage.Steps,
			InputTokens:    p.Usage.InputTokens,
			OutputTokens:   p.Usage.OutputTokens,
			CostUSD:        p.Usage.CostUSD,
			SandboxSeconds: p.Usage.SandboxSeconds,
			WallTime:       p.WallTime.Round(time.Millisecond).String(),
		},
		Resume: resumeHint(st.Tenant, st.Session, st.User, p),
	}
	s.log.InfoContext(ctx, "session paused over its budget", "session", st.Session, "budget", p.Budget, "reason", p.Reason)
	if err := s.append(ctx, st, &ev, fmt.Sprintf("%s:paused:%d", st.Session, st.Pauses+1)); err != nil {
		return err
	}
	s.metrics.ended.WithLabelValues("paused").Inc()
	return nil
}

// resume records that a paused session goes on, a reviewer having raised
// its budget; the step then goes on where the session was.
func (s *Service) resume(ctx context.Context, st *state, r core.Resume) error {
	ev := event.SessionResumed{
		Header:   event.NewHeader(event.TypeSessionResumed, st.Tenant, st.Session),
		Raise:    r.Raise,
		Reviewer: r.Reviewer,
	}
	s.log.InfoContext(ctx, "session resumed", "session", st.Session, "raise", r.Raise, "reviewer", r.Reviewer)
	return s.append(ctx, st, &ev, fmt.Sprintf("%s:resumed:%d", st.Session, st.Pauses))
}

// resumeHint says what lets a session paused under p go on: over a cap
// of the session's, the corral raise that asks a reviewer for twice the
// cap now in force; over its user's daily budget, which no raise lifts,
// the next UTC day and a follow-up as user.
func resumeHint(tenant string, session uuid.UUID, user string, p core.Pause) string {
	scope, limit, _ := strings.Cut(p.Budget, ".")
	if scope != "session" {
		return fmt.Sprintf("the user's daily budget (%s) starts again at 00:00 UTC; then go on with: corral run --tenant %s --session %s --user %s \"go on\"", p.Budget, tenant, session, shellescape.Quote(user))
	}
	var flag string
	switch l := p.Limits; limit {
	case "steps":
		flag = "--steps " + strconv.Itoa(2*l.Steps)
	case "tokens":
		flag = "--tokens " + strconv.FormatInt(2*l.Tokens, 10)
	case "cost_usd":
		flag = "--cost-usd " + strconv.FormatFloat(2*l.CostUSD, 'f', -1, 64)
	case "sandbox_seconds":
		flag = "--sandbox-seconds " + strconv.FormatFloat(2*l.SandboxSeconds, 'f', -1, 64)
	case "wall_time":
		flag = "--wall-time " + (2 * l.WallTime).String()
	}
	return fmt.Sprintf("corral raise --tenant %s %s %s --reason \"why the session needs more\"", tenant, session, flag)
}

// watchWallTime pauses the sessions this process has worked on that have
// run past their wall-time budget while waiting (for a tool call, say, or
// a reviewer): no step comes to check them until then. A candidate is
// checked again under its lock and lease, from its log, before it is
// paused: the cached state may be out of date. A paused session is no
// candidate: its wall time stands still until it resumes.
func (s *Service) watchWallTime(ctx context.Context) error {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		for _, w := range s.watched.over(time.Now()) {
			if err := s.checkWallTime(ctx, w.tenant, w.session); err != nil && ctx.Err() == nil && !errors.Is(err, bus.ErrNotYet) {
				s.log.WarnContext(ctx, "check a session's wall time", "session", w.session, "err", err)
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
		p := core.OverWallTime(st.State, core.Env{Policy: s.cfg.Policy, ApprovalKey: s.cfg.ApprovalKey, Now: time.Now()})
		if p == nil {
			return nil
		}
		return s.pause(ctx, st, *p)
	})
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return nil // busy: the step will see to it
	}
	return err
}
