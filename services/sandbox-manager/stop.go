package sandboxmanager

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

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
// session that is stopped or fails. Every instance hears every stop and
// acts on the sessions it has.
func (s *Service) watchStops(ctx context.Context) error {
	nc := s.js.Conn()
	sub, err := nc.Subscribe("events.*.*.session.*", func(m *nats.Msg) {
		data, err := bus.Resolve(ctx, s.js, m.Data)
		if err != nil {
			return
		}
		ev, err := event.Parse(data)
		if err != nil {
			return
		}
		var why string
		switch e := ev.(type) {
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
			if err := s.driver.Destroy(h.Tenant, h.Session); err != nil {
				s.log.Warn("destroy sandbox", "session", h.Session, "err", err)
				return
			}
			s.log.Info("sandbox destroyed", "session", h.Session, "why", why)
		}()
	})
	if err != nil {
		return fmt.Errorf("watch session stops: %w", err)
	}
	<-ctx.Done()
	_ = sub.Unsubscribe() // fails only on a closed connection, which drops it anyway
	return nil
}
