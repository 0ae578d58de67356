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
)

// errStopped is the cause of a call cancelled because its session was
// stopped.
var errStopped = errors.New("session stopped")

// stops tracks the running call of each session, so that stopping the
// session kills it, and the sessions stopped lately, so that their calls
// still queued are not run.
type stops struct {
	mu      sync.Mutex
	running map[uuid.UUID]context.CancelCauseFunc
	stopped map[uuid.UUID]stopInfo
}

type stopInfo struct {
	why string
	at  time.Time
}

// stoppedFor is how long a stop is remembered.
const stoppedFor = time.Hour

// start registers the running call of session and returns its context,
// cancelled when the session is stopped, and the func that unregisters it;
// or the reason the session was stopped, if it was.
func (t *stops) start(ctx context.Context, session uuid.UUID) (context.Context, func(), string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if st, ok := t.stopped[session]; ok {
		return nil, nil, st.why
	}
	if t.running == nil {
		t.running = make(map[uuid.UUID]context.CancelCauseFunc)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	t.running[session] = cancel
	return ctx, func() {
		t.mu.Lock()
		delete(t.running, session)
		t.mu.Unlock()
		cancel(nil)
	}, ""
}

// stop kills the running call of session, if any, and remembers why.
func (t *stops) stop(session uuid.UUID, why string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped == nil {
		t.stopped = make(map[uuid.UUID]stopInfo)
	}
	now := time.Now()
	for id, st := range t.stopped {
		if now.Sub(st.at) > stoppedFor {
			delete(t.stopped, id)
		}
	}
	t.stopped[session] = stopInfo{why: why, at: now}
	if cancel := t.running[session]; cancel != nil {
		cancel(errStopped)
	}
}

// resume forgets a stop: a follow-up request restarted the session.
func (t *stops) resume(session uuid.UUID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.stopped, session)
}

// watchStops kills the running call and destroys the sandbox of each
// session that is stopped or fails, and ends the sandbox of each session
// that completes. Every instance reads every stop, from
// the session logs: an ordered consumer rides through reconnects, and a
// restarted instance reads the last [stoppedFor] again, so a stop made
// while it was down still keeps the session's queued calls from running.
func (s *Service) watchStops(ctx context.Context) error {
	var cons jetstream.Consumer
	for {
		var err error
		cons, err = s.js.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{
				"events.*.*." + event.Kind(event.TypeSessionStopped),
				"events.*.*." + event.Kind(event.TypeSessionFailed),
				"events.*.*." + event.Kind(event.TypeSessionRequested),
				"events.*.*." + event.Kind(event.TypeSessionCompleted),
			},
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
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("watch session stops: %w", err)
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	// What is read back at start counts only as each session's last word:
	// a session stopped and then continued keeps its workspace.
	replay := make(map[uuid.UUID]any)
	var order []uuid.UUID
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
		ev := s.sessionEvent(ctx, m.Data())
		if ev == nil {
			continue
		}
		if caughtUp {
			s.apply(ev)
			continue
		}
		h := ev.(event.Event).Head()
		if _, ok := replay[h.Session]; !ok {
			order = append(order, h.Session)
		}
		replay[h.Session] = ev
		if meta, err := m.Metadata(); err == nil && meta.NumPending == 0 {
			for _, id := range order {
				s.apply(replay[id])
			}
			replay, order, caughtUp = nil, nil, true
		}
	}
}

func ptr[T any](v T) *T { return &v }

// sessionEvent reads a session lifecycle event from the log.
func (s *Service) sessionEvent(ctx context.Context, data []byte) any {
	data, err := bus.Resolve(ctx, s.js, data)
	if err != nil {
		return nil
	}
	ev, err := event.Parse(data)
	if err != nil {
		return nil
	}
	return ev
}

// apply acts on a session's stop, failure, completion or new request.
func (s *Service) apply(ev any) {
	var why string
	switch e := ev.(type) {
	case *event.SessionCompleted:
		if s.driver.Active(e.Tenant, e.Session) {
			go s.endCompleted(e.Tenant, e.Session)
		}
		return
	case *event.SessionStopped:
		why = fmt.Sprintf("the session was stopped by %s", e.By)
		if e.Reason != "" {
			why += ": " + e.Reason
		}
	case *event.SessionFailed:
		why = "the session failed: " + e.Reason
	case *event.SessionRequested:
		s.stops.resume(e.Session)
		return
	default:
		return
	}
	h := ev.(event.Event).Head()
	s.stops.stop(h.Session, why)
	go func() {
		if s.snaps != nil {
			// A follow-up restores the workspace from its snapshot.
			s.snaps.gone(h.Session)
		}
		if err := s.driver.Destroy(h.Tenant, h.Session); err != nil {
			s.log.Warn("destroy sandbox", "session", h.Session, "err", err)
			return
		}
		s.place.release(context.Background(), h.Tenant, h.Session)
		s.log.Info("sandbox destroyed", "session", h.Session, "why", why)
	}()
}

// endCompleted ends the sandbox of a session that completed, keeping its
// workspace for a follow-up, which starts a new sandbox on it; unless a
// follow-up came first. Under the session's lock, so no call runs
// meanwhile.
func (s *Service) endCompleted(tenant string, session uuid.UUID) {
	ctx := context.Background()
	unlock, err := s.sessions.Lock(ctx, session.String())
	if err != nil {
		return
	}
	defer unlock()
	rctx, rcancel := bus.Bound(ctx)
	last, err := s.events.GetLastMsgForSubject(rctx, bus.SessionLifecycle(tenant, session))
	rcancel()
	if err != nil {
		s.log.Warn("end the sandbox of a completed session", "session", session, "err", err)
		return
	}
	if ev, ok := s.sessionEvent(ctx, last.Data).(*event.SessionCompleted); !ok || ev.Session != session {
		return // continued since
	}
	if s.driver.Stop(tenant, session) {
		s.log.Info("sandbox stopped", "session", session, "why", "the session completed")
	}
}
