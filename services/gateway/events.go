package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/sessionlog"
	"corral.dev/services/gateway/internal/wire"
)

// folded is a session's log as the API's events, as far as it was read.
type folded struct {
	events []wire.Event
	sess   *sessionlog.Session
	folder wire.Folder
	// last is the stream sequence of the last event read, 0 for none.
	last uint64
}

// readEvents reads the whole log of c's tenant's session through c's
// connection, every event judged, and folds it into the API's events.
func readEvents(ctx context.Context, c *caller, session uuid.UUID) (*folded, error) {
	entries, sess, err := c.logs.ReadAll(ctx, c.tenant, session)
	if err != nil {
		return nil, err
	}
	f := &folded{sess: sess}
	for _, en := range entries {
		f.events = append(f.events, f.folder.Fold(en.Seq, en.Event)...)
		f.last = en.Seq
	}
	return f, nil
}

// listEvents answers GET /v1/sessions/{id}/events: the session's events,
// oldest first (order=desc: newest first), a page at a time; next_page
// is the cursor of the page's last event.
func (s *Service) listEvents(ctx context.Context, c *caller, w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if _, _, err := s.session(ctx, c, id); err != nil {
		return err
	}
	q := r.URL.Query()
	n, err := limit(q, maxLimit)
	if err != nil {
		return err
	}
	created, err := readTimeFilter(q, "created_at")
	if err != nil {
		return err
	}
	types := values(q, "types")
	var after *wire.Cursor
	if p := q.Get("page"); p != "" {
		cur, err := wire.ParseCursor(p)
		if err != nil {
			return badRequest("page: %v", err)
		}
		after = &cur
	}
	f, err := readEvents(ctx, c, uuid.MustParse(id))
	if err != nil {
		return err
	}
	desc := q.Get("order") == "desc"
	all := f.events
	if desc {
		all = slices.Clone(all)
		slices.Reverse(all)
	}
	page := wire.Page[wire.Event]{Data: []wire.Event{}}
	more := false
	for _, ev := range all {
		switch {
		case after != nil && !desc && !after.Before(ev.Cursor),
			after != nil && desc && !ev.Cursor.Before(*after),
			len(types) > 0 && !slices.Contains(types, ev.Type),
			!created.keeps(*ev.ProcessedAt):
			continue
		}
		if len(page.Data) == n {
			more = true
			break
		}
		page.Data = append(page.Data, ev)
	}
	if more {
		next := page.Data[len(page.Data)-1].Cursor.String()
		page.NextPage = &next
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}

// streamEvents answers GET /v1/sessions/{id}/events/stream: the session's
// events as server-sent events, each with its ID as the SSE id, from now
// on, or from after the event a Last-Event-ID header names (the ID of the
// event a client saw last), until the client goes.
func (s *Service) streamEvents(ctx context.Context, c *caller, w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if _, _, err := s.session(ctx, c, id); err != nil {
		return err
	}
	if d := values(r.URL.Query(), "event_deltas"); len(d) > 0 {
		return unsupported("event_deltas (previews of events as the model writes them)")
	}
	session := uuid.MustParse(id)
	f, err := readEvents(ctx, c, session)
	if err != nil {
		return err
	}
	// The event a client saw last, by its ID (what an SDK hands it, and
	// what a browser's EventSource sends back), or by its cursor.
	var resume *wire.Cursor
	if h := r.Header.Get("Last-Event-ID"); h != "" {
		i := slices.IndexFunc(f.events, func(ev wire.Event) bool { return ev.ID == h })
		if i >= 0 {
			resume = &f.events[i].Cursor
		} else if cur, err := wire.ParseCursor(h); err == nil {
			resume = &cur
		} else {
			return badRequest("Last-Event-ID %q: no event of session %s", h, id)
		}
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		return errors.New("the server cannot stream")
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	out := &sse{w: w, flusher: flusher}
	var missed []wire.Event
	if resume != nil {
		for _, ev := range f.events {
			if resume.Before(ev.Cursor) {
				missed = append(missed, ev)
			}
		}
	}
	if err := out.send(missed); err != nil {
		return nil // the client went away
	}
	err = s.follow(ctx, c, f, out)
	if err != nil && ctx.Err() == nil {
		// The answer has begun: say what failed in the stream itself.
		out.fail(err)
	}
	return nil
}

// sse writes server-sent events.
type sse struct {
	w       http.ResponseWriter
	flusher http.Flusher
}

// send writes evs, each with its ID as its id and its type as its event
// name, and flushes them (the headers alone, for none).
func (o *sse) send(evs []wire.Event) error {
	for _, ev := range evs {
		b, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(o.w, "id: %s\nevent: %s\ndata: %s\n\n", ev.ID, ev.Type, b); err != nil {
			return err
		}
	}
	o.flusher.Flush()
	return nil
}

// ping keeps an idle stream open through proxies; clients skip it.
func (o *sse) ping() error {
	if _, err := fmt.Fprint(o.w, "event: ping\ndata: {}\n\n"); err != nil {
		return err
	}
	o.flusher.Flush()
	return nil
}

// fail ends the stream with an error event, as the API does.
func (o *sse) fail(err error) {
	b, _ := json.Marshal(wire.ErrorBody{Type: "error", Error: wire.ErrorDetail{Type: wire.APIError, Message: err.Error()}})
	fmt.Fprintf(o.w, "event: error\ndata: %s\n\n", b)
	o.flusher.Flush()
}

// follow sends out the API events of each event of f's session stored
// after f.last, as they come, and a ping when none came for the
// heartbeat's time, until ctx is done or the client goes. It reads through
// an ordered consumer of the session's events on c's connection, which
// re-creates itself after a reconnect.
func (s *Service) follow(ctx context.Context, c *caller, f *folded, out *sse) error {
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{bus.SessionEvents(c.tenant, f.sess.ID)},
		InactiveThreshold: 5 * time.Second,
	}
	if f.last > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, f.last+1
	}
	cctx, stop := bus.WhilePermitted(ctx, c.nc, bus.ConsumerAPI(bus.StreamEvents))
	cons, err := c.js.OrderedConsumer(cctx, bus.StreamEvents, cfg)
	stop()
	if err != nil {
		return fmt.Errorf("follow session %s: %w", f.sess.ID, bus.Refusal(cctx, err))
	}
	msgs := make(chan jetstream.Msg, 64)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case msgs <- m:
		case <-ctx.Done():
		}
	})
	if err != nil {
		return fmt.Errorf("follow session %s: %w", f.sess.ID, err)
	}
	defer cc.Stop()
	ping := time.NewTicker(s.cfg.Heartbeat)
	defer ping.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ping.C:
			if err := out.ping(); err != nil {
				return nil
			}
		case m := <-msgs:
			meta, err := m.Metadata()
			if err != nil {
				return err
			}
			msg := bus.Msg{Subject: m.Subject(), Data: m.Data(), StreamSeq: meta.Sequence.Stream}
			en, err := c.logs.Judge(ctx, msg)
			if errors.Is(err, sessionlog.ErrRejected) {
				continue
			}
			if err != nil {
				return err
			}
			if c.logs.Admit(ctx, f.sess, en, msg.Data) != nil {
				continue // a result of a call not dispatched to its writer
			}
			evs := f.folder.Fold(en.Seq, en.Event)
			f.last = en.Seq
			if len(evs) == 0 {
				continue
			}
			if err := out.send(evs); err != nil {
				return nil // the client went away
			}
			ping.Reset(s.cfg.Heartbeat)
		}
	}
}
