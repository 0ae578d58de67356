package harness

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/sessionlog"
	"corral.dev/services/harness/internal/core"
)

// state is a session as a step works on it: its core state, folded from
// its log, with what the log says of who may write what next (trust), and
// whether it may no longer stand for the log (stale).
type state struct {
	*core.State
	// stale is set when an event was folded in that may not follow
	// State.Seq in the log.
	stale bool
	// trust is what the log says of the session that its next event is
	// judged by: its user, and where each call was dispatched.
	trust *sessionlog.Session
}

// load folds a session's log into its state. It starts from the state this
// process kept after its last step of the session, if it has it, and reads
// only the events stored since; the log is the truth, whichever harness
// wrote them. The caller must hold the session's lock and its lease;
// owned says the lease stayed this harness's since that step.
//
// When no harness can have written to the session's log since the state
// was kept (it was kept by a step that ended well, and the lease stayed
// here), and the step's trigger is a tool result recorded directly after
// it, load folds the trigger in and reads nothing. Events after the
// trigger, written meanwhile by others (a stop, another call's result),
// are then not folded: the step's first write, conditional on the log
// ending at the trigger, finds them.
func (s *Service) load(ctx context.Context, tenant string, session uuid.UUID, owned bool) (*state, error) {
	var (
		st   *state
		seq  uint64
		last bool
	)
	if s.cfg.Speedups.FoldCache {
		st, seq, last = s.folded.take(tenant, session)
	}
	if st == nil {
		st, seq = newState(tenant, session), 0
		st.ResultCap = s.cfg.ToolOutputCap
	} else if owned && last && s.cfg.Speedups.Follower {
		if e, ok := s.follower(ctx, st, seq); ok {
			st.Apply(e.Seq, e.Event)
			return st, nil
		}
	}
	// What is read is judged, and what is rejected is left out (and
	// dead-lettered): a step folds only what the harness and the
	// services each may write.
	entries, err := s.logs.Read(ctx, st.trust, seq)
	if err != nil {
		// Dropped: what was judged before the error is in st's trust,
		// which would refuse it when read again.
		return nil, fmt.Errorf("load session %s: %w", session, err)
	}
	for _, e := range entries {
		st.Apply(e.Seq, e.Event)
	}
	return st, nil
}

// follower returns the tool result that triggered the step ctx was made
// for, judged, if it was recorded directly after the event at seq (its
// After).
func (s *Service) follower(ctx context.Context, st *state, seq uint64) (sessionlog.Entry, bool) {
	m, ok := bus.Delivery(ctx)
	if !ok || m.StreamSeq <= seq || !strings.Contains(m.Subject, "."+event.Kind(event.TypeToolCompleted)+".") {
		return sessionlog.Entry{}, false
	}
	e, err := s.logs.Judge(ctx, m)
	if err != nil {
		return sessionlog.Entry{}, false
	}
	r, ok := e.Event.(*event.ToolCompleted)
	if !ok || r.After != seq || e.Tenant != st.Tenant || e.Session != st.Session {
		return sessionlog.Entry{}, false
	}
	if s.logs.Admit(ctx, st.trust, e, m.Data) != nil {
		return sessionlog.Entry{}, false
	}
	return e, true
}

// keep keeps st, which a step is done with, for the session's next step,
// unless st no longer stands for the log up to st.Seq; failed says the
// step failed, and may have written events st lacks.
func (s *Service) keep(st *state, failed bool) {
	if !st.stale {
		s.folded.put(st, st.Seq, !failed)
	}
	s.watched.note(st, core.WallTimeEnds(st.State, core.Env{Policy: s.cfg.Policy, ApprovalKey: s.cfg.ApprovalKey}))
}

// append records ev, an event of st's session, and folds it into st. The
// write is conditional on the log ending where st was folded to, so that
// st then stands for the log up to ev without reading it back. Should
// another event have come in between, ev is recorded all the same and st
// is marked stale: the session's next step reads the log again. An event
// recorded already under msgID counts as recorded (and is not folded in).
func (s *Service) append(ctx context.Context, st *state, ev event.Event, msgID string) error {
	if err := s.appendNew(ctx, st, ev, msgID); err != nil && !errors.Is(err, sessionlog.ErrDuplicate) {
		return err
	}
	return nil
}

// appendNew is [Service.append] for an event that must be new: one
// recorded already under msgID returns an error wrapping
// [sessionlog.ErrDuplicate].
func (s *Service) appendNew(ctx context.Context, st *state, ev event.Event, msgID string) error {
	if !s.cfg.Speedups.ConditionalAppend {
		// The state no longer surely stands for the log: the next step
		// reads it again.
		st.stale = true
	}
	if !st.stale {
		seq, err := s.logs.Append(ctx, ev, msgID, st.Seq)
		if err == nil {
			st.fold(seq, ev)
			return nil
		}
		// Whatever happened, st no longer surely stands for the log.
		st.stale = true
		if !errors.Is(err, sessionlog.ErrNotLast) {
			return err
		}
	}
	if err := s.logs.Record(ctx, ev, msgID); err != nil {
		return err
	}
	// Where the log stored ev is not known: folded in at the last
	// sequence known, it is passed over when read back, not taken for a
	// replay.
	_ = st.trust.AdmitUnplaced(st.address(ev), ev)
	st.Apply(st.Seq, ev)
	return nil
}

func newState(tenant string, session uuid.UUID) *state {
	return &state{State: core.New(tenant, session), trust: sessionlog.NewSession(tenant, session)}
}

// fold folds in an event the harness itself wrote for st's session, at
// seq: it is what the log now holds, so the session's trust learns from
// it too.
func (st *state) fold(seq uint64, ev event.Event) {
	_ = st.trust.Admit(st.address(ev), ev)
	st.Apply(seq, ev)
}

// address is where the harness writes ev, an event of st's session.
func (st *state) address(ev event.Event) sessionlog.Address {
	return sessionlog.Address{Tenant: st.Tenant, Session: st.Session, Type: ev.Head().Type, Writer: sessionlog.Harness}
}

// foldCache keeps the states this process folded last, so a step reads only
// the events stored since. It is bounded; a state it dropped is folded
// again from the whole log. A step takes its session's state out and puts
// it back when done, unless it went stale: no copy is made, which would
// cost in proportion to the session's length at every step.
type foldCache struct {
	mu sync.Mutex
	m  map[string]foldedState // by bus.SessionKey
}

type foldedState struct {
	st  *state
	seq uint64
	// last is set while this process knows of no event of the session's
	// written after seq by a harness: it was kept by a step that ended
	// well. See [Service.load].
	last bool
}

const foldCacheSize = 4096

// take returns the state kept for the session, now the caller's: it is
// kept no more until put back. The caller holds the session's lock.
func (c *foldCache) take(tenant string, session uuid.UUID) (_ *state, seq uint64, last bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := bus.SessionKey(tenant, session)
	f, ok := c.m[key]
	if !ok || f.st.Tenant != tenant || f.st.Session != session {
		return nil, 0, false
	}
	delete(c.m, key)
	return f.st, f.seq, f.last
}

// put keeps st, a state that stands for its session's log up to seq; last
// as in [foldedState].
func (c *foldCache) put(st *state, seq uint64, last bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[string]foldedState)
	}
	key := bus.SessionKey(st.Tenant, st.Session)
	if _, ok := c.m[key]; !ok && len(c.m) >= foldCacheSize {
		for k := range c.m { // drop one at random
			delete(c.m, k)
			break
		}
	}
	c.m[key] = foldedState{st: st, seq: seq, last: last}
}

// watchedSessions are the sessions this process has stepped that were
// running under a wall-time budget when it last did, with when each, as
// it last saw it, runs out of that budget: for the wall-time watch. They
// are kept apart from the fold cache, which keeps only the states a step
// may build on (none that went stale, none at all with the conditional
// append off), so that the watch sees the same sessions whatever the
// speed-ups; and by deadline, not by state, which the session's next step
// goes on to change. Bounded as the fold cache is.
type watchedSessions struct {
	mu sync.Mutex
	m  map[string]watched // by bus.SessionKey
}

// watched is a session of [watchedSessions].
type watched struct {
	tenant  string
	session uuid.UUID
	ends    time.Time
}

// note notes st's session, running out of its wall-time budget at ends,
// or forgets it when it is not running or has no such budget (ends is
// zero).
func (w *watchedSessions) note(st *state, ends time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	key := bus.SessionKey(st.Tenant, st.Session)
	if st.Status != core.StatusRunning || ends.IsZero() {
		delete(w.m, key)
		return
	}
	if w.m == nil {
		w.m = make(map[string]watched)
	}
	if _, ok := w.m[key]; !ok && len(w.m) >= foldCacheSize {
		for k := range w.m { // drop one at random
			delete(w.m, k)
			break
		}
	}
	w.m[key] = watched{st.Tenant, st.Session, ends}
}

// over returns the sessions noted that ran out of their wall-time budget
// by now.
func (w *watchedSessions) over(now time.Time) []watched {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []watched
	for _, s := range w.m {
		if !now.Before(s.ends) {
			out = append(out, s)
		}
	}
	return out
}

// failureID is the message ID of a failure of the session's current
// request at its current turn: unique per request, so a follow-up's failure
// is not taken for a duplicate of an earlier one.
func (st *state) failureID() string {
	return fmt.Sprintf("%s:turn:%d", st.LastRequest, st.Turn+1)
}
