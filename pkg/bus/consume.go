package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/event"
	"corral.dev/pkg/lock"
)

// ErrPermanent marks a failure that no redelivery can fix: a handler that
// returns an error wrapping it has its message given up at once.
var ErrPermanent = errors.New("permanent failure")

// ErrNotYet marks a message that cannot be handled yet but will be (a lease
// held elsewhere, say): it is redelivered after RetryDelay and never given
// up for that.
var ErrNotYet = errors.New("not yet")

// NotYet returns an error matching [ErrNotYet] whose message is
// redelivered after d rather than after RetryDelay, for a handler that
// knows when it can go on (when a lease runs out, say).
func NotYet(d time.Duration, err error) error {
	return &notYetError{after: d, err: err}
}

type notYetError struct {
	after time.Duration
	err   error
}

func (e *notYetError) Error() string { return e.err.Error() }

func (e *notYetError) Unwrap() []error { return []error{ErrNotYet, e.err} }

// ErrRejected marks a message that must not be believed: its subject, its
// sender or its body do not agree (see package sessionlog). It is given up
// at once, as a permanent failure is, but OnGiveUp is not called: the
// message speaks for no one, and its session must not suffer for it.
var ErrRejected = errors.New("rejected")

// Rejected wraps err so that it matches [ErrRejected].
func Rejected(err error) error {
	return fmt.Errorf("%w: %w", ErrRejected, err)
}

// ErrBusy is why a message is given up when too many of its key already
// wait for their turn (see [Consumer.MaxKeyWaiting]).
var ErrBusy = errors.New("busy")

// Permanent wraps err so that it matches [ErrPermanent].
func Permanent(err error) error {
	return fmt.Errorf("%w: %w", ErrPermanent, err)
}

// Msg is a delivered message as a [Handler] sees it.
type Msg struct {
	Subject   string
	Data      []byte
	StreamSeq uint64
	// Delivered counts deliveries of this message, from 1.
	Delivered uint64
	MsgID     string
	// Stored is when the stream stored the message; only
	// [LastBySubject] sets it.
	Stored time.Time
	// Spoofed names a header that only the server writes, on what it
	// answers from a stream (its subject, its sequence), which the stored
	// message carried itself: it is an echo of such an answer, which the
	// server published on a reply subject its requester chose, or a
	// forgery of one. Its subject and sequence are the server's all the
	// same (see [FromRaw]); what it says speaks for no one. "" if none.
	Spoofed string
}

type msgKey struct{}

// Delivery returns the delivered message a handler's ctx was made for: a
// handler that must know of redeliveries reads Delivered from it.
func Delivery(ctx context.Context) (Msg, bool) {
	m, ok := ctx.Value(msgKey{}).(Msg)
	return m, ok
}

// Handler handles one message. It returns nil when the message's effect is
// recorded, and must be idempotent: delivery is at least once.
type Handler func(ctx context.Context, m Msg) error

// Decode adapts a handler of typed messages: the payload is decoded as JSON
// into a T, and a payload that does not decode is given up as permanent.
func Decode[T any](fn func(ctx context.Context, m *T) error) Handler {
	return func(ctx context.Context, m Msg) error {
		v := new(T)
		if err := json.Unmarshal(m.Data, v); err != nil {
			return Permanent(fmt.Errorf("decode %s: %w", m.Subject, err))
		}
		return fn(ctx, v)
	}
}

// Consumer describes a durable consumer and how to handle its messages.
type Consumer struct {
	Stream string
	// Config is the consumer's configuration; Durable must be set. Zero
	// AckPolicy, AckWait and MaxDeliver get explicit acks, [AckWait] and 10.
	Config jetstream.ConsumerConfig
	// Concurrency is how many messages are handled at once (default 16).
	Concurrency int
	// Timeout bounds one handler call (default 5 minutes). While a handler
	// runs, the message's ack deadline is extended with in-progress acks.
	Timeout time.Duration
	Handler Handler
	// OnGiveUp, when set, is called before a message is terminated, with
	// the reason, so the owner can record the failure where users see it.
	// An error from it leaves the message to be redelivered.
	OnGiveUp func(ctx context.Context, m Msg, reason error) error
	// Grace is how long in-flight handlers may finish once Consume's
	// context is done (default [ShutdownGrace]).
	Grace time.Duration
	// RetryDelay is the first redelivery delay after a failure (default 1s);
	// it doubles with each delivery up to 30s.
	RetryDelay time.Duration
	// AckDelay, when set, is how long a handled message's ack waits. On a
	// work queue that an ack would empty, the server replaces the file
	// that held the message with a new one, per message when messages come
	// one at a time; an ack that comes after the next message does not
	// empty the queue. A message whose handler is done is safe to deliver
	// again, as any handled message is, should the process die meanwhile.
	AckDelay time.Duration
	// Admit, when set, names each message's key and group: messages of
	// one key are handled one at a time, in the order received, and at
	// most the gate's PerGroup of one group at once. A message that waits
	// for its key or its group holds no slot meanwhile (see [lock.Gate]).
	Admit func(m Msg) (key, group string)
	// MaxKeyWaiting, when set, bounds the messages of one key (see
	// Admit) that wait here for their turn: one more is given up at once,
	// as a permanent failure matching [ErrBusy], rather than kept. A
	// message that waits is still pending on the server, and a consumer's
	// pending messages are bounded (MaxAckPending): with no bound, one key
	// whose handler runs long (a session asking its model), and a flood
	// of messages behind it, would take them all, and the server would
	// deliver no other key's, nor any other tenant's.
	MaxKeyWaiting int
	// Gate, when set, is where messages wait for their turn, and may be
	// shared with other work of the process; its Size then bounds the
	// handlers at once, and Concurrency only how many messages are
	// fetched at a time. Default: a gate of Concurrency slots.
	Gate   *lock.Gate
	Logger *slog.Logger

	js      jetstream.JetStream
	flights *flights
}

// flights are the messages a consumer received and has not answered yet,
// and those it handled whose acks wait (see [Consumer.AckDelay]).
type flights struct {
	mu   sync.Mutex
	msgs map[*jetstream.Msg]struct{}
	acks []delayedAck
	// queued wakes the ack loop when an ack is queued.
	queued chan struct{}
}

type delayedAck struct {
	msg jetstream.Msg
	due time.Time
}

// AckWait is how long the server waits for a consumer's ack before it
// delivers the message again. Handlers keep their messages with in-progress
// acks at a third of it, so it bounds only how soon the work of a process
// that died is taken up elsewhere.
const AckWait = 5 * time.Second

// PullHeartbeat is how often the server tells a consumer's pull that it
// is still waiting for messages: every reader of a stream through a
// consumer asks for it (jetstream.PullHeartbeat). nats.go v1.55.0 sends
// no pull while another is being sent, and messages handled in that
// moment can leave none outstanding: none is sent again until two
// heartbeats are missed, 30 s by default, 10 s for an ordered consumer.
const PullHeartbeat = time.Second

// ShutdownGrace is how long [Consume] lets in-flight handlers finish after
// its context is done, before cancelling theirs, unless [Consumer.Grace]
// says otherwise.
const ShutdownGrace = 10 * time.Second

// Consume creates or updates the durable consumer and handles its messages
// until ctx is done. Then it stops fetching, gives in-flight handlers their
// grace period to finish, cancels those still running (their messages are
// redelivered) and returns nil. It returns an error only if the consumer
// cannot be created.
func Consume(ctx context.Context, js jetstream.JetStream, c Consumer) error {
	c.setDefaults()
	c.js = js
	c.flights = &flights{msgs: make(map[*jetstream.Msg]struct{}), queued: make(chan struct{}, 1)}
	cfg := c.Config
	// The server would drop a message silently after its last delivery;
	// the limit is enforced in handle instead, so a message that fails
	// every delivery is still given up on the record.
	cfg.MaxDeliver = -1
	cctx, stop := WhilePermitted(ctx, js.Conn(), ConsumerAPI(c.Stream))
	cons, err := js.CreateOrUpdateConsumer(cctx, c.Stream, cfg)
	stop()
	if err != nil && ctx.Err() != nil {
		return nil // stopped before it started
	}
	if err != nil {
		return fmt.Errorf("create consumer %s: %w", c.Config.Durable, Refusal(cctx, err))
	}
	log := c.Logger.With("stream", c.Stream, "consumer", c.Config.Durable)

	// Handlers outlive ctx by up to the grace period, so they get their own.
	base, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	// Kept up until every handler has returned, cancelled or not: their
	// messages are kept alive and their delayed acks sent till then.
	keeping, stopKeeping := context.WithCancel(context.WithoutCancel(ctx))
	var helpers sync.WaitGroup
	helpers.Go(func() { c.keepAll(keeping) })
	if c.AckDelay > 0 {
		helpers.Go(func() { c.ackLoop(keeping) })
	}
	defer func() { stopKeeping(); helpers.Wait() }()
	var wg sync.WaitGroup
	var waiting keyCounts // this consumer's messages waiting for their turn, by key
	gate := c.Gate
	if gate == nil {
		gate = &lock.Gate{Size: c.Concurrency}
	}
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		// Keep the message alive from the moment it arrives: it may wait
		// here for its turn longer than the ack wait.
		stop := c.keepAlive(msg)
		if ctx.Err() != nil { // shutting down: leave it to the next consumer
			stop()
			_ = msg.Nak()
			return
		}
		m := FromDelivery(msg)
		var key, group string
		if c.Admit != nil {
			key, group = c.Admit(m)
		}
		bounded := c.MaxKeyWaiting > 0 && key != ""
		if bounded && waiting.count(key) >= c.MaxKeyWaiting {
			busy := Permanent(fmt.Errorf("%w: %d messages of %s already wait for their turn here; send it again once they are done", ErrBusy, c.MaxKeyWaiting, key))
			wg.Go(func() { c.settle(base, log, msg, m, stop, func(context.Context, Msg) error { return busy }) })
			return
		}
		t := gate.Enter(key, group)
		// Counted while it waits (only this callback counts one in).
		waits := bounded && !t.Admitted()
		if waits {
			waiting.add(key)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := t.Wait(ctx)
			if waits {
				waiting.done(key)
			}
			if err != nil || ctx.Err() != nil {
				t.Done()
				stop()
				_ = msg.Nak()
				return
			}
			defer t.Done()
			c.settle(context.WithValue(base, ticketKey{}, t), log, msg, m, stop, c.call)
		}()
		// Take no more while a message that could be handled waits for a
		// slot; one that waits for its key or group does not stop others.
		_ = t.Queued(ctx)
	},
		jetstream.PullMaxMessages(c.Concurrency),
		// A pull skipped stalls the consumer 2 s, not 30 (see
		// [PullHeartbeat]).
		jetstream.PullHeartbeat(PullHeartbeat),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			log.DebugContext(ctx, "consume", "err", err)
		}),
	)
	if err != nil {
		return fmt.Errorf("consume %s: %w", c.Config.Durable, err)
	}
	<-ctx.Done()
	grace, graceCancel := context.WithTimeout(base, c.Grace)
	defer graceCancel()
	cc.Drain()
	select {
	case <-cc.Closed():
	case <-grace.Done():
		cancel()
		<-cc.Closed()
	}
	// No callback runs any more, so no handler can start.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-grace.Done():
		cancel()
		<-done
	}
	return nil
}

// keyCounts counts messages by key.
type keyCounts struct {
	mu sync.Mutex
	n  map[string]int
}

// count returns how many messages of key are counted.
func (k *keyCounts) count(key string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.n[key]
}

// add counts one more message of key.
func (k *keyCounts) add(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.n == nil {
		k.n = make(map[string]int)
	}
	k.n[key]++
}

// done counts one message of key out.
func (k *keyCounts) done(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.n[key]--; k.n[key] <= 0 {
		delete(k.n, key)
	}
}

func (c *Consumer) setDefaults() {
	if c.Config.AckPolicy == jetstream.AckNonePolicy {
		c.Config.AckPolicy = jetstream.AckExplicitPolicy
	}
	if c.Config.AckWait == 0 {
		c.Config.AckWait = AckWait
	}
	if c.Config.MaxDeliver == 0 {
		c.Config.MaxDeliver = 10
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 16
	}
	if c.Config.MaxAckPending == 0 {
		c.Config.MaxAckPending = 4 * c.Concurrency
	}
	if c.Timeout <= 0 {
		c.Timeout = 5 * time.Minute
	}
	if c.Grace <= 0 {
		c.Grace = ShutdownGrace
	}
	if c.RetryDelay <= 0 {
		c.RetryDelay = time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// FromDelivery returns a message a consumer delivered as a handler sees
// it.
func FromDelivery(msg jetstream.Msg) Msg {
	m := Msg{Subject: msg.Subject(), Data: msg.Data(), MsgID: msg.Headers().Get(jetstream.MsgIDHeader)}
	// A delivery's headers are the stored message's alone.
	m.Spoofed = spoofed(msg.Headers(), 0)
	if meta, err := msg.Metadata(); err == nil {
		m.StreamSeq, m.Delivered = meta.Sequence.Stream, meta.NumDelivered
	}
	return m
}

type ticketKey struct{}

// Yield gives back the slot of the handler whose ctx this is, and its
// place in its group, for the rest of its run, keeping its key (see
// [Consumer.Admit]): for a handler that from now on only waits for work
// done elsewhere. Messages of the same key still wait for it. It does
// nothing for a ctx no [Consume] made.
func Yield(ctx context.Context) {
	if t, ok := ctx.Value(ticketKey{}).(*lock.Ticket); ok {
		t.Yield()
	}
}

// settle handles a message with handle (the handler, or a refusal made
// before it) and answers the server as its outcome says.
func (c *Consumer) settle(base context.Context, log *slog.Logger, msg jetstream.Msg, m Msg, stopKeepAlive func(), handle Handler) {
	log = log.With("subject", m.Subject, "stream_seq", m.StreamSeq, "msg_id", m.MsgID)
	ctx, cancel := context.WithTimeout(context.WithValue(base, msgKey{}, m), c.Timeout)
	defer cancel()

	err := handle(ctx, m)
	stopKeepAlive()

	switch {
	case err == nil:
		if err := c.ack(msg); err != nil {
			log.WarnContext(ctx, "ack", "err", err)
		}
		log.DebugContext(ctx, "message handled")
	case errors.Is(err, ErrNotYet):
		delay := c.RetryDelay
		if ny, ok := errors.AsType[*notYetError](err); ok {
			delay = max(ny.after, time.Millisecond)
		}
		_ = msg.NakWithDelay(delay)
		log.DebugContext(ctx, "message not ready, will retry", "delivered", m.Delivered, "err", err)
	case errors.Is(err, ErrRejected):
		gctx, gcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer gcancel()
		if gerr := c.deadLetter(gctx, m, err, RejectedID(c.Stream, m.StreamSeq)); gerr != nil {
			log.WarnContext(ctx, "dead letter", "err", gerr)
			_ = msg.NakWithDelay(c.backoff(m.Delivered))
			return
		}
		_ = msg.TermWithReason(truncate(err.Error(), 200))
		log.ErrorContext(ctx, "message rejected", "err", err)
	case errors.Is(err, ErrPermanent) || (c.Config.MaxDeliver > 0 && m.Delivered >= uint64(c.Config.MaxDeliver)):
		// The handler's ctx may be what failed; recording the failure
		// still needs one.
		gctx, gcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer gcancel()
		if gerr := c.giveUp(gctx, m, err); gerr != nil {
			log.WarnContext(ctx, "give up", "err", gerr)
			_ = msg.NakWithDelay(c.backoff(m.Delivered))
			return
		}
		_ = msg.TermWithReason(truncate(err.Error(), 200))
		log.ErrorContext(ctx, "message given up", "delivered", m.Delivered, "err", err)
	default:
		_ = msg.NakWithDelay(c.backoff(m.Delivered))
		log.WarnContext(ctx, "message failed, will retry", "delivered", m.Delivered, "err", err)
	}
}

// call runs the handler, turning a panic into an error.
func (c *Consumer) call(ctx context.Context, m Msg) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	return c.Handler(ctx, m)
}

// keepAlive sends in-progress acks for msg until stop is called, so that a
// message that waits for a handler, or whose handler runs long, is not
// redelivered to someone else meanwhile. One ticker, [Consumer.keepAll],
// serves every message in flight.
func (c *Consumer) keepAlive(msg jetstream.Msg) (stop func()) {
	f := c.flights
	f.mu.Lock()
	defer f.mu.Unlock()
	key := &msg
	f.msgs[key] = struct{}{}
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.msgs, key)
	}
}

// ack acknowledges a handled message, now or after AckDelay.
func (c *Consumer) ack(msg jetstream.Msg) error {
	if c.AckDelay <= 0 {
		return msg.Ack()
	}
	c.flights.mu.Lock()
	c.flights.acks = append(c.flights.acks, delayedAck{msg, time.Now().Add(c.AckDelay)})
	c.flights.mu.Unlock()
	select {
	case c.flights.queued <- struct{}{}:
	default:
	}
	return nil
}

// sendAcks sends the delayed acks that are due by t, and returns when the
// next one is due (zero if none waits).
func (c *Consumer) sendAcks(t time.Time) time.Time {
	c.flights.mu.Lock()
	n := 0
	for n < len(c.flights.acks) && !c.flights.acks[n].due.After(t) {
		n++
	}
	due := slices.Clone(c.flights.acks[:n])
	c.flights.acks = slices.Delete(c.flights.acks, 0, n)
	var next time.Time
	if len(c.flights.acks) > 0 {
		next = c.flights.acks[0].due
	}
	c.flights.mu.Unlock()
	for _, a := range due {
		if err := a.msg.Ack(); err != nil {
			c.Logger.Warn("ack", "stream", c.Stream, "consumer", c.Config.Durable, "subject", a.msg.Subject(), "err", err)
		}
	}
	return next
}

// ackLoop sends delayed acks when they are due, until ctx is done; then
// it sends those left at once.
func (c *Consumer) ackLoop(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			c.sendAcks(time.Now().Add(c.AckDelay))
			return
		case <-c.flights.queued:
		case <-timer.C:
		}
		if next := c.sendAcks(time.Now()); !next.IsZero() {
			timer.Reset(time.Until(next))
		}
	}
}

// keepAll sends an in-progress ack for every message in flight, every
// third of the ack wait, until ctx is done.
func (c *Consumer) keepAll(ctx context.Context) {
	t := time.NewTicker(c.Config.AckWait / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.flights.mu.Lock()
		msgs := make([]jetstream.Msg, 0, len(c.flights.msgs))
		for m := range c.flights.msgs {
			msgs = append(msgs, *m)
		}
		c.flights.mu.Unlock()
		for _, m := range msgs {
			_ = m.InProgress()
		}
	}
}

func (c *Consumer) giveUp(ctx context.Context, m Msg, reason error) error {
	if c.OnGiveUp != nil {
		if err := c.OnGiveUp(ctx, m, reason); err != nil {
			return err
		}
	}
	return c.deadLetter(ctx, m, reason, fmt.Sprintf("%s:%s:%d", c.Stream, c.Config.Durable, m.StreamSeq))
}

func (c *Consumer) deadLetter(ctx context.Context, m Msg, reason error, msgID string) error {
	return DeadLetter(ctx, c.js, c.Stream, c.Config.Durable, m, reason, msgID)
}

// DeadLetter copies m, a message of stream that reader gave up on, to the
// DEADLETTER stream with the reason, under msgID.
func DeadLetter(ctx context.Context, js jetstream.JetStream, stream, reader string, m Msg, reason error, msgID string) error {
	dl := event.DeadLetter{
		Type:      event.TypeDeadLetter,
		ID:        uuid.Must(uuid.NewV7()),
		Time:      time.Now().UTC(),
		Stream:    stream,
		Consumer:  reader,
		Subject:   m.Subject,
		StreamSeq: m.StreamSeq,
		Delivered: m.Delivered,
		Reason:    truncate(reason.Error(), 4096),
		Data:      m.Data,
	}
	return Publish(ctx, js, deadLetterSubject(stream, reader), msgID, dl)
}

// RejectedID is the message ID of the dead letter of a rejected message:
// the same whichever reader rejects it, so that the DEADLETTER stream's
// duplicate window keeps one.
func RejectedID(stream string, seq uint64) string {
	return fmt.Sprintf("%s:rejected:%d", stream, seq)
}

// backoff is the redelivery delay after n failed deliveries: RetryDelay
// doubling up to 30s, with jitter so retries of many messages spread out.
func (c *Consumer) backoff(n uint64) time.Duration {
	d := c.RetryDelay << min(max(n, 1)-1, 5)
	if d > 30*time.Second {
		d = 30 * time.Second
	}
	return d/2 + rand.N(d/2)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
