package sandboxmanager

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/sessionlog"
)

// errStopped is the cause of a call cancelled because its session was
// stopped.
var errStopped = errors.New("session stopped")

// stops tracks the running call of each session, so that stopping the
// session kills it, and the sessions stopped lately, so that their calls
// still queued are not run. Both are by [bus.SessionKey]: one tenant's
// session ID may be another's.
type stops struct {
	mu      sync.Mutex
	running map[string]context.CancelCauseFunc
	stopped map[string]stopInfo
}

type stopInfo struct {
	why string
	at  time.Time
}

// stoppedFor is how long a stop is remembered.
const stoppedFor = time.Hour

// start registers the running call of the session whose key is key and
// returns its context, cancelled when the session is stopped, and the
// func that unregisters it; or the reason the session was stopped, if it
// was.
func (t *stops) start(ctx context.Context, key string) (context.Context, func(), string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if st, ok := t.stopped[key]; ok {
		return nil, nil, st.why
	}
	if t.running == nil {
		t.running = make(map[string]context.CancelCauseFunc)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	t.running[key] = cancel
	return ctx, func() {
		t.mu.Lock()
		delete(t.running, key)
		t.mu.Unlock()
		cancel(nil)
	}, ""
}

// stop kills the running call of the session whose key is key, if any,
// and remembers why.
func (t *stops) stop(key, why string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped == nil {
		t.stopped = make(map[string]stopInfo)
	}
	now := time.Now()
	for k, st := range t.stopped {
		if now.Sub(st.at) > stoppedFor {
			delete(t.stopped, k)
		}
	}
	t.stopped[key] = stopInfo{why: why, at: now}
	if cancel := t.running[key]; cancel != nil {
		cancel(errStopped)
	}
}

// resume forgets a stop: a follow-up request restarted the session.
func (t *stops) resume(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.stopped, key)
}

// lifecycle are the types of a session's lifecycle events. A pause over a
// budget (session.paused) is none: the session goes on where it was after
// a raise, so its sandbox stays, suspended once idle like any other, and
// its queued calls still run. Only a stop, or a failure (the tenant's
// daily budget among them), destroys it.
var lifecycle = []string{event.TypeSessionRequested, event.TypeSessionCompleted, event.TypeSessionStopped, event.TypeSessionFailed}

// watchStops kills the running call and destroys the sandbox of each
// session that is stopped or fails, and ends the sandbox of each session
// that completes. Every instance reads every stop, from
// the session logs: an ordered consumer rides through reconnects, and a
// restarted instance reads the last [stoppedFor] again, so a stop made
// while it was down still keeps the session's queued calls from running.
// Each event is judged by the session log ([sessionlog.Log.Judge]): only
// one its subject names, written by the harness (which records a stop
// only for the session's own user), is acted on, and only on the tenant
// and session of its subject.
func (s *Service) watchStops(ctx context.Context) error {
	var filters []string
	for _, typ := range lifecycle {
		filters = append(filters, sessionlog.KindFilter(typ))
	}
	var cons jetstream.Consumer
	for {
		var err error
		cons, err = s.js.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{
			FilterSubjects:    filters,
			DeliverPolicy:     jetstream.DeliverByStartTimePolicy,
			OptStartTime:      ptr(time.Now().Add(-stoppedFor)),
			InactiveThreshold: time.Minute,
		})
		if err == nil {
			break
		}
		s.log.WarnContext(ctx, "watch session stops", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
	it, err := cons.Messages(jetstream.PullHeartbeat(bus.PullHeartbeat))
	if err != nil {
		return fmt.Errorf("watch session stops: %w", err)
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	// What is read back at start counts only as each session's last word:
	// a session stopped and then continued keeps its workspace.
	replay := make(map[string]sessionlog.Entry)
	var order []string
	caughtUp := false
	if info, err := cons.Info(ctx); err == nil && info.NumPending == 0 {
		caughtUp = true
	}
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			s.log.WarnContext(ctx, "watch session stops", "err", err)
			continue
		}
		meta, merr := m.Metadata()
		e, ok := s.judge(ctx, bus.FromDelivery(m))
		if ctx.Err() != nil {
			return nil
		}
		if ok && caughtUp {
			s.apply(e)
			continue
		}
		if ok {
			key := bus.SessionKey(e.Tenant, e.Session)
			if _, seen := replay[key]; !seen {
				order = append(order, key)
			}
			replay[key] = e
		}
		if !caughtUp && merr == nil && meta.NumPending == 0 {
			for _, key := range order {
				s.apply(replay[key])
			}
			replay, order, caughtUp = nil, nil, true
		}
	}
}

func ptr[T any](v T) *T { return &v }

// judge judges one lifecycle event read from the log, and reports whether
// it is to be acted on. A rejected event is skipped (the log counted and
// dead-lettered it); one that cannot be judged yet (the payloads store out
// of reach) is tried again until it can, or until ctx is done: a stop must
// not be missed.
func (s *Service) judge(ctx context.Context, m bus.Msg) (sessionlog.Entry, bool) {
	for {
		e, err := s.logs.Judge(ctx, m)
		switch {
		case err == nil:
			return e, true
		case errors.Is(err, sessionlog.ErrRejected):
			return sessionlog.Entry{}, false
		}
		s.log.WarnContext(ctx, "read a session event", "subject", m.Subject, "stream_seq", m.StreamSeq, "err", err)
		select {
		case <-ctx.Done():
			return sessionlog.Entry{}, false
		case <-time.After(time.Second):
		}
	}
}

// apply acts on a session's stop, failure, completion or new request, e,
// which the log accepted: its tenant and session are its subject's.
func (s *Service) apply(e sessionlog.Entry) {
	tenant, session := e.Tenant, e.Session
	key := bus.SessionKey(tenant, session)
	var why string
	switch ev := e.Event.(type) {
	case *event.SessionCompleted:
		if s.driver.Active(tenant, session) {
			go s.endCompleted(tenant, session)
		}
		return
	case *event.SessionStopped:
		why = fmt.Sprintf("the session was stopped by %s", ev.By)
		if ev.Reason != "" {
			why += ": " + ev.Reason
		}
	case *event.SessionFailed:
		why = "the session failed: " + ev.Reason
	case *event.SessionRequested:
		s.stops.resume(key)
		return
	default:
		return
	}
	s.stops.stop(key, why)
	go func() {
		if s.snaps != nil {
			// A follow-up restores the workspace from its snapshot.
			s.snaps.gone(tenant, session)
		}
		s.notes.drop(tenant, session)
		if err := s.driver.Destroy(context.Background(), tenant, session); err != nil {
			s.log.Warn("destroy sandbox", "tenant", tenant, "session", session, "err", err)
			return
		}
		s.place.release(context.Background(), tenant, session)
		s.log.Info("sandbox destroyed", "tenant", tenant, "session", session, "why", why)
	}()
}

// endCompleted ends the sandbox of a session that completed, keeping its
// workspace for a follow-up, which starts a new sandbox on it; unless a
// follow-up came first. Under the session's lock, so no call runs
// meanwhile.
func (s *Service) endCompleted(tenant string, session uuid.UUID) {
	ctx := context.Background()
	unlock, err := s.sessions.Lock(ctx, bus.SessionKey(tenant, session))
	if err != nil {
		return
	}
	defer unlock()
	last, ok, err := s.lastLifecycle(ctx, tenant, session)
	if err != nil {
		s.log.Warn("end the sandbox of a completed session", "tenant", tenant, "session", session, "err", err)
		return
	}
	if !ok || last.Type != event.TypeSessionCompleted {
		return // continued since
	}
	if s.driver.Stop(tenant, session) {
		s.log.Info("sandbox stopped", "tenant", tenant, "session", session, "why", "the session completed")
	}
}

// lastLifecycle returns a session's last lifecycle event that the log
// accepts (requested, completed, stopped or failed), and false when it has
// none. Each kind's last is read on its own, which reads one event unless
// it is rejected, rather than the whole session.
func (s *Service) lastLifecycle(ctx context.Context, tenant string, session uuid.UUID) (sessionlog.Entry, bool, error) {
	var last sessionlog.Entry
	found := false
	for _, typ := range lifecycle {
		e, ok, err := s.logs.Last(ctx, tenant, session, typ)
		if err != nil {
			return sessionlog.Entry{}, false, err
		}
		if ok && (!found || e.Seq > last.Seq) {
			last, found = e, true
		}
	}
	return last, found, nil
}
