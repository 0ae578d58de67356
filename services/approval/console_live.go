package approval

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/livetext"
	"corral.dev/pkg/sessionindex"
	"corral.dev/pkg/sessionlog"
)

// sse writes server-sent events, each one JSON value on one line: nothing
// in a page (a carriage return in a command, say) can end an event early.
type sse struct {
	rw        http.ResponseWriter
	flusher   http.Flusher
	keepAlive *time.Ticker
}

// startSSE starts an event stream on rw; false (and an error answered)
// when rw cannot stream. The caller stops it.
func startSSE(rw http.ResponseWriter) (*sse, bool) {
	flusher, ok := rw.(http.Flusher)
	if !ok {
		http.Error(rw, "streaming unsupported", http.StatusInternalServerError)
		return nil, false
	}
	rw.Header().Set("Content-Type", "text/event-stream")
	rw.Header().Set("Cache-Control", "no-store")
	// The headers go at once: a client waits for them before anything.
	rw.WriteHeader(http.StatusOK)
	flusher.Flush()
	return &sse{rw: rw, flusher: flusher, keepAlive: time.NewTicker(15 * time.Second)}, true
}

func (s *sse) stop() { s.keepAlive.Stop() }

// send writes one event; false when it could not.
func (s *sse) send(name string, v any) bool {
	data, err := json.Marshal(v)
	if err != nil {
		return false
	}
	if _, err := fmt.Fprintf(s.rw, "event: %s\ndata: %s\n\n", name, data); err != nil {
		return false
	}
	s.flusher.Flush()
	return true
}

// wait waits for changed, keeping the stream alive; false when ctx ends
// first.
func (s *sse) wait(ctx context.Context, changed <-chan struct{}) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case <-s.keepAlive.C:
			fmt.Fprint(s.rw, ": keep-alive\n\n")
			s.flusher.Flush()
		case <-changed:
			return true
		}
	}
}

// stepsUpdate is what the timeline's stream sends for new events: the
// steps rendered, each replacing the one of its ID on the page or added
// at the end, and the sequence of the last event they show.
type stepsUpdate struct {
	HTML string `json:"html"`
	Seq  uint64 `json:"seq"`
	// Ended is set when the session's request ended (the stop button
	// goes), Running when it runs again.
	Ended   bool `json:"ended,omitempty"`
	Running bool `json:"running,omitempty"`
	// Status is the session's status once the event, when it says.
	Status sessionindex.Status `json:"status,omitempty"`
}

// liveUpdate is a piece of the session's output as it comes: the model's
// text (op text, appended; reset, the text of a turn asked again; clear,
// once the turn is recorded), or a running call's output (op output).
type liveUpdate struct {
	Op   string    `json:"op"`
	Text string    `json:"text,omitempty"`
	Call uuid.UUID `json:"call,omitzero"`
}

// sessionLive streams a session's timeline after the event the page
// showed last (after=<seq>) as it happens, and its output as it comes.
func (w *web) sessionLive(rw http.ResponseWriter, r *http.Request, rv reviewer) {
	after, err := strconv.ParseUint(cmp.Or(r.URL.Query().Get("after"), "0"), 10, 64)
	if err != nil {
		http.Error(rw, "after must be the sequence of an event of the session's log", http.StatusBadRequest)
		return
	}
	tenant, session, entries, sess, err := w.session(r.Context(), r, rv)
	if err != nil {
		w.notFound(rw, err)
		return
	}
	pieces := make(chan *nats.Msg, 1024)
	sub, err := w.s.js.Conn().ChanSubscribe(bus.LiveSubject(tenant, session), pieces)
	if err != nil {
		w.s.log.Error("hear a session's output", "err", err)
		http.Error(rw, "The session's output cannot be heard now; try again.", http.StatusServiceUnavailable)
		return
	}
	defer func() { _ = sub.Unsubscribe() }()
	s, ok := startSSE(rw)
	if !ok {
		return
	}
	defer s.stop()

	tl := newTimeline(w.s.cfg.Prices.Cost)
	var turn livetext.Turn
	for _, en := range entries {
		steps := tl.add(en)
		if en.Seq > after {
			if !w.sendSteps(s, rv, en, steps) {
				return
			}
		}
		if e, ok := en.Event.(*event.ModelResponded); ok {
			turn.Recorded(e.Turn)
		}
	}

	ctx, cancel := context.WithCancel(r.Context())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	next := make(chan sessionlog.Entry)
	wg.Go(func() {
		err := w.follow(ctx, sess, entries[len(entries)-1].Seq, next)
		if err != nil && ctx.Err() == nil {
			w.s.log.Warn("follow a session for the console", "tenant", tenant, "session", session, "err", err)
		}
		cancel() // the browser connects again, from the event it saw last
	})
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.keepAlive.C:
			fmt.Fprint(rw, ": keep-alive\n\n")
			s.flusher.Flush()
		case en := <-next:
			if !w.sendSteps(s, rv, en, tl.add(en)) {
				return
			}
			if e, ok := en.Event.(*event.ModelResponded); ok {
				turn.Recorded(e.Turn)
				if !s.send("live", liveUpdate{Op: "clear"}) {
					return
				}
			}
		case m := <-pieces:
			if u, ok := hear(&turn, m.Data); ok && !s.send("live", u) {
				return
			}
		}
	}
}

// hear returns what a live piece changes on the page, if anything.
func hear(turn *livetext.Turn, data []byte) (liveUpdate, bool) {
	var l event.Live
	if json.Unmarshal(data, &l) != nil {
		return liveUpdate{}, false
	}
	if l.Kind == event.LiveOutput {
		return liveUpdate{Op: "output", Call: l.Call, Text: l.Text}, l.Call != uuid.Nil && l.Text != ""
	}
	switch turn.Hear(l) {
	case livetext.Started, livetext.Appended:
		return liveUpdate{Op: "text", Text: l.Text}, true
	case livetext.Restarted:
		return liveUpdate{Op: "reset", Text: turn.Text()}, true
	}
	return liveUpdate{}, false
}

// sendSteps sends the steps one event added or changed.
func (w *web) sendSteps(s *sse, rv reviewer, en sessionlog.Entry, steps []*step) bool {
	var buf bytes.Buffer
	for _, st := range steps {
		if err := pages.ExecuteTemplate(&buf, "step", stepView{Step: st, CSRF: w.csrf(rv), Decides: rv.mayDecide(), Path: sessionPath(en.Tenant, en.Session)}); err != nil {
			w.s.log.Error("render a step", "err", err)
			return false
		}
	}
	u := stepsUpdate{HTML: buf.String(), Seq: en.Seq}
	switch en.Event.(type) {
	case *event.SessionCompleted:
		u.Ended, u.Status = true, sessionindex.Completed
	case *event.SessionFailed:
		u.Ended, u.Status = true, sessionindex.Failed
	case *event.SessionStopped:
		u.Ended, u.Status = true, sessionindex.Stopped
	case *event.SessionRequested, *event.SessionResumed:
		u.Running, u.Status = true, sessionindex.Running
	case *event.SessionPaused:
		u.Status = sessionindex.Paused
	case *event.ApprovalRequested, *event.BudgetRaise:
		u.Status = sessionindex.Waiting
	}
	return s.send("steps", u)
}

// stepView is one step as the "step" template renders it: with what its
// forms need.
type stepView struct {
	Step    *step
	CSRF    string
	Decides bool
	Path    string
}

// follow sends each event of sess's log stored after sequence after, that
// the log accepts, to next, until ctx is done.
func (w *web) follow(ctx context.Context, sess *sessionlog.Session, after uint64, next chan<- sessionlog.Entry) error {
	cons, err := w.s.js.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{bus.SessionEvents(sess.Tenant, sess.ID)},
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       after + 1,
		InactiveThreshold: 5 * time.Second,
	})
	if err != nil {
		return err
	}
	it, err := cons.Messages(jetstream.PullHeartbeat(bus.PullHeartbeat))
	if err != nil {
		return err
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	for {
		msg, err := it.Next()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			return err
		}
		if _, err := msg.Metadata(); err != nil {
			return err
		}
		m := bus.FromDelivery(msg)
		en, err := w.s.console.Judge(ctx, m)
		if errors.Is(err, sessionlog.ErrRejected) {
			continue
		}
		if err != nil {
			return err
		}
		if w.s.console.Admit(ctx, sess, en, m.Data) != nil {
			continue
		}
		select {
		case next <- en:
		case <-ctx.Done():
			return nil
		}
	}
}
