package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/sessionlog"
	"corral.dev/services/gateway/internal/wire"
)

// An event stream is fed by an ordered consumer of the session's log and,
// with previews, by the live subject, both on the connection of the
// stream's key, which every request of that key shares. What they deliver
// goes to the stream's own goroutine through a bounded queue:
//   - the log's messages are pulled only as the queue has room, so a slow
//     reader holds up its own stream alone, and the server, not the
//     gateway, keeps what it has not read; once it is more than
//     Config.MaxBehind events behind the log, its stream ends with an error
//     saying where to go on from (Last-Event-ID);
//   - live pieces, which nothing keeps, are dropped when the queue is
//     full: the previews they make stop for that turn (a piece missing
//     is one lost), and the events themselves follow in the log.
// A reader that stops reading altogether is let go of once a write has
// waited writeWait.

// Bounds of a stream.
const (
	// streamQueue is how many messages a stream holds for its reader,
	// and streamPull how many more its consumer may have pulled.
	streamQueue = 256
	streamPull  = 64
	// flushBytes is about the most written to a stream at once.
	flushBytes = 256 << 10
	// writeWait is how long a write to a stream may wait for its reader.
	writeWait = 10 * time.Second
	// defaultMaxBehind is how many events a stream's reader may fall
	// behind the session's log, by default.
	defaultMaxBehind = 10_000
)

// errLagged ends a stream whose reader fell too far behind.
var errLagged = errors.New("this stream fell too far behind the session's events (its reader is too slow) and ended")

// stream is the queue of one event stream, and what it has made of it.
type stream struct {
	queue     chan streamItem
	heartbeat time.Duration
	maxBehind uint64
	// previews is set for a stream asked with event_deltas.
	previews *previews
}

// streamItem is a message of the session's log, a live piece, or why the
// log's consumer stopped.
type streamItem struct {
	msg  jetstream.Msg
	live []byte
	err  error
}

func newStream(heartbeat time.Duration, maxBehind int) *stream {
	return &stream{queue: make(chan streamItem, streamQueue), heartbeat: heartbeat, maxBehind: uint64(maxBehind)}
}

// hearLive subscribes the stream to the live pieces of c's tenant's
// session, and returns what ends it.
func (st *stream) hearLive(c *caller, session uuid.UUID) (func(), error) {
	sub, err := c.nc.Subscribe(bus.LiveSubject(c.tenant, session), func(m *nats.Msg) {
		select {
		case st.queue <- streamItem{live: m.Data}:
		default: // the reader is behind: a piece lost
		}
	})
	if err == nil {
		// The server has the subscription before the log is read.
		if err = c.nc.FlushTimeout(5 * time.Second); err != nil {
			_ = sub.Unsubscribe()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("hear the live output of session %s: %w", session, err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// follow sends out the API events of each event of v's session stored
// after v.last, and the previews of the live pieces heard, as they come,
// and a ping when nothing came for the heartbeat's time, until ctx is
// done or the client goes (nil), or the reader lags ([errLagged]). It
// reads through an ordered consumer of the session's events on c's
// connection, which re-creates itself after a reconnect.
func (st *stream) follow(ctx context.Context, c *caller, v view, out *sse) error {
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{bus.SessionEvents(c.tenant, v.sess.ID)},
		InactiveThreshold: 5 * time.Second,
	}
	if v.last > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, v.last+1
		if out.lastID == "" {
			// Past every event read: where a stream that ends before
			// it sends one goes on from.
			out.lastID = wire.Cursor{Seq: v.last, N: 1 << 30}.String()
		}
	}
	cctx, stop := bus.WhilePermitted(ctx, c.nc, bus.ConsumerAPI(bus.StreamEvents))
	cons, err := c.js.OrderedConsumer(cctx, bus.StreamEvents, cfg)
	var msgs jetstream.MessagesContext
	if err == nil {
		// Made here: the consumer is created by its first pull.
		msgs, err = cons.Messages(jetstream.PullMaxMessages(streamPull), jetstream.PullHeartbeat(bus.PullHeartbeat))
	}
	stop()
	if err != nil {
		return fmt.Errorf("follow session %s: %w", v.sess.ID, bus.Refusal(cctx, err))
	}
	done := make(chan struct{})
	defer msgs.Stop()
	defer close(done)
	go st.pull(msgs, done)
	ping := time.NewTicker(st.heartbeat)
	defer ping.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ping.C:
			out.ping()
		case it := <-st.queue:
			// What else is queued goes out with it, in one write of
			// a bounded size.
			if err := st.takeQueued(ctx, c, &v, it, out); err != nil {
				return err
			}
		}
		if !out.pending() {
			continue
		}
		if out.flush() != nil {
			return nil // the client went away
		}
		ping.Reset(st.heartbeat)
	}
}

// pull puts the log's messages on the queue as it has room, until done.
func (st *stream) pull(msgs jetstream.MessagesContext, done <-chan struct{}) {
	for {
		m, err := msgs.Next()
		it := streamItem{msg: m, err: err}
		if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
			return
		}
		select {
		case st.queue <- it:
		case <-done:
			return
		}
		if err != nil {
			return
		}
	}
}

// takeQueued takes it, and what is queued after it while out holds less
// than flushBytes.
func (st *stream) takeQueued(ctx context.Context, c *caller, v *view, it streamItem, out *sse) error {
	for {
		if err := st.take(ctx, c, v, it, out); err != nil {
			return err
		}
		if out.buf.Len() >= flushBytes {
			return nil
		}
		select {
		case it = <-st.queue:
		default:
			return nil
		}
	}
}

// take adds to out what one queued message makes.
func (st *stream) take(ctx context.Context, c *caller, v *view, it streamItem, out *sse) error {
	if it.err != nil {
		return it.err
	}
	if it.msg == nil {
		var l event.Live
		if st.previews == nil || json.Unmarshal(it.live, &l) != nil {
			return nil // not a piece: nothing to preview
		}
		for _, p := range st.previews.hear(l) {
			out.preview(p)
		}
		return nil
	}
	meta, err := it.msg.Metadata()
	if err != nil {
		return err
	}
	if meta.NumPending > st.maxBehind {
		return errLagged
	}
	msg := bus.FromDelivery(it.msg)
	en, err := c.logs.Judge(ctx, msg)
	if errors.Is(err, sessionlog.ErrRejected) {
		return nil
	}
	if err != nil {
		return err
	}
	if c.logs.Admit(ctx, v.sess, en, msg.Data) != nil {
		return nil // a result of a call not dispatched to its writer
	}
	for _, ev := range v.folder.Fold(en.Seq, en.Event) {
		out.event(ev)
	}
	if r, ok := en.Event.(*event.ModelResponded); ok && st.previews != nil {
		st.previews.record(r.Turn)
	}
	return nil
}

// sse writes server-sent events: added to a buffer, and written and
// flushed together.
type sse struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	buf bytes.Buffer
	// lastID is the ID of the last event written: where the client goes
	// on from.
	lastID string
}

// newSSE answers with an event stream, its headers sent.
func newSSE(w http.ResponseWriter) (*sse, error) {
	if _, ok := w.(http.Flusher); !ok {
		return nil, errors.New("the server cannot stream")
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return &sse{w: w, rc: http.NewResponseController(w)}, nil
}

// event adds ev, with its ID as its id and its type as its event name.
func (o *sse) event(ev wire.Event) {
	b, _ := json.Marshal(ev) // nothing in an Event fails to marshal
	fmt.Fprintf(&o.buf, "id: %s\nevent: %s\ndata: %s\n\n", ev.ID, ev.Type, b)
	o.lastID = ev.ID
}

// preview adds a preview (an event_start or an event_delta): with no id,
// since it is no event of the session's a client could go on from.
func (o *sse) preview(p any) {
	var typ string
	switch p := p.(type) {
	case previewStart:
		typ = p.Type
	case previewDelta:
		typ = p.Type
	}
	b, _ := json.Marshal(p)
	fmt.Fprintf(&o.buf, "event: %s\ndata: %s\n\n", typ, b)
}

// ping keeps an idle stream open through proxies; clients skip it.
func (o *sse) ping() { o.buf.WriteString("event: ping\ndata: {}\n\n") }

// pending reports whether anything waits to be written.
func (o *sse) pending() bool { return o.buf.Len() > 0 }

// flush writes what was added, waiting at most writeWait for the reader.
func (o *sse) flush() error {
	// Not every writer has deadlines (a test's recorder); the server's
	// do.
	_ = o.rc.SetWriteDeadline(time.Now().Add(writeWait))
	_, err := o.w.Write(o.buf.Bytes())
	o.buf.Reset()
	if err != nil {
		return err
	}
	return o.rc.Flush()
}

// end ends the stream with an error event, as the API does.
func (o *sse) end(typ, msg string) {
	b, _ := json.Marshal(wire.ErrorBody{Type: "error", Error: wire.ErrorDetail{Type: typ, Message: msg}})
	fmt.Fprintf(&o.buf, "event: error\ndata: %s\n\n", b)
	_ = o.flush()
}
