package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/lease"
	"corral.dev/pkg/model"
	"corral.dev/pkg/policy"
	"corral.dev/pkg/sessionlog"
)

// Daily usage is counted from the session logs into the usage bucket by
// one harness at a time: the holder of the key [usageCounterKey] in the
// leases bucket. It reads the model responses and sandbox results in
// stream order, from where counting last got to (the usage bucket's key
// [usageCursor]), a batch at a time, and adds each batch to its tenants'
// and users' days with one compare-and-set per key. Each key remembers
// the last event counted in it, and only later events are added to it:
// the counter that takes over after one that died, starting from the
// cursor it left, counts nothing twice, nor would two counters that
// overlapped for a moment.
const (
	usageCounterKey = "usage-counter"
	usageCursor     = "_counted"
)

// usageBatch bounds one batch of events counted; usageLinger is how long
// a batch waits for more events after its first.
const (
	usageBatch  = 1000
	usageLinger = 50 * time.Millisecond
)

// usageCounter counts daily usage whenever this harness holds the
// counter's lease.
type usageCounter struct {
	js     jetstream.JetStream
	logs   *sessionlog.Log
	usage  jetstream.KeyValue
	leases lease.Bucket
	me     []byte
	log    *slog.Logger
	// price is what a model response counts; read reads a key of the
	// usage bucket. Both are the budget checks' own, so that what is
	// counted is what they count.
	price func(modelName string, u model.Usage) policy.Usage
	read  func(ctx context.Context, key string) (dayUsage, uint64, error)
	// counted holds the usage keys as the counter last wrote them; only
	// the counter, one batch at a time, uses it. It is bounded, the least
	// recently used key forgotten: it is read again when next needed.
	counted *lru.Cache[string, countedUsage]
}

// run takes the counter's lease whenever it is free and counts until ctx
// is done.
func (c *usageCounter) run(ctx context.Context) error {
	for {
		l, err := c.take(ctx)
		if err == nil {
			err = c.count(ctx, l)
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = l.Delete(dctx)
			cancel()
		}
		if ctx.Err() != nil {
			return nil
		}
		if err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			c.log.WarnContext(ctx, "usage counter", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(bus.LeaseTTL / 2):
		}
	}
}

// take takes the counter's lease if no harness holds it.
func (c *usageCounter) take(ctx context.Context) (*lease.Lease, error) {
	rctx, cancel := bus.Bound(ctx)
	defer cancel()
	return c.leases.Create(rctx, usageCounterKey, c.me)
}

// count counts batches while it holds the counter's lease l, renewing
// it; it returns when ctx is done or the lease is lost.
func (c *usageCounter) count(ctx context.Context, l *lease.Lease) error {
	ctx, stop := l.Hold(ctx, bus.LeaseTTL/3)
	err := c.countHeld(ctx)
	if lost := stop(); lost != nil {
		return fmt.Errorf("renew the usage counter's lease: %w", lost)
	}
	return err
}

// countHeld counts batches until ctx is done: until the lease is lost, if
// not before.
func (c *usageCounter) countHeld(ctx context.Context) error {
	// Cancelled on return, so that the consumer's callback, which may be
	// waiting to hand over an event, returns too.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	from, cursorRev, err := c.cursor(ctx)
	if err != nil {
		return err
	}
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{
			sessionlog.KindFilter(event.TypeModelResponded),
			sessionlog.KindFilter(event.TypeToolCompleted),
			sessionlog.KindFilter(event.TypeContextCompacted),
		},
		InactiveThreshold: 5 * time.Second,
	}
	if from > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from+1
	}
	cons, err := c.js.OrderedConsumer(ctx, bus.StreamEvents, cfg)
	if err != nil {
		return fmt.Errorf("read the session logs: %w", err)
	}
	// Events arrive as they are recorded; each batch is what has arrived
	// by the time the one before is counted.
	arrived := make(chan jetstream.Msg, usageBatch)
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		select {
		case arrived <- msg:
		case <-ctx.Done():
		}
	}, jetstream.PullHeartbeat(bus.PullHeartbeat))
	if err != nil {
		return fmt.Errorf("read the session logs: %w", err)
	}
	defer cc.Stop()
	moved, movedTo := time.Now(), from
	defer func() {
		if from > movedTo {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_, _ = c.moveCursor(dctx, from, cursorRev)
		}
	}()
	for {
		var batch []jetstream.Msg
		select {
		case <-ctx.Done():
			return nil
		case msg := <-arrived:
			batch = append(batch, msg)
		}
		// What else comes meanwhile joins the batch: at a trickle of
		// events, a key is written a few times a second, not per event.
		linger := time.NewTimer(usageLinger)
	collect:
		for len(batch) < usageBatch {
			select {
			case msg := <-arrived:
				batch = append(batch, msg)
			case <-linger.C:
				break collect
			case <-ctx.Done():
				break collect
			}
		}
		linger.Stop()
		var spent []spending
		last := from
		for _, msg := range batch {
			meta, err := msg.Metadata()
			if err != nil {
				return fmt.Errorf("read the session logs: %w", err)
			}
			sp, err := c.spending(ctx, bus.FromDelivery(msg))
			if err != nil {
				return err
			}
			spent = append(spent, sp...)
			last = meta.Sequence.Stream
		}
		if err := c.addUsage(ctx, spent); err != nil {
			return err
		}
		from = last
		// The cursor only spares a counter that takes over some reading:
		// the keys know what they counted. It is moved once a second.
		if time.Since(moved) >= time.Second {
			if cursorRev, err = c.moveCursor(ctx, from, cursorRev); err != nil {
				return err
			}
			moved, movedTo = time.Now(), from
		}
	}
}

// spending is what one event adds to one key of the usage bucket.
type spending struct {
	key string
	seq uint64
	u   policy.Usage
}

// spending returns what m, a model response, a compaction's summary or a
// sandbox call, adds to its tenant's and user's days. An event the
// session log rejects (one the harness or the sandbox-manager did not
// write, or whose stored payload is missing) counts nothing, and counting
// goes on.
func (c *usageCounter) spending(ctx context.Context, m bus.Msg) ([]spending, error) {
	e, err := c.logs.Judge(ctx, m)
	if errors.Is(err, sessionlog.ErrRejected) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("count usage of event %d: %w", m.StreamSeq, err)
	}
	var (
		u    policy.Usage
		user string
	)
	switch ev := e.Event.(type) {
	case *event.ModelResponded:
		u, user = c.price(ev.Model, ev.Usage), ev.User
	case *event.ContextCompacted:
		if ev.Model == "" {
			return nil, nil // cleared only: no model was asked
		}
		u, user = c.price(ev.Model, ev.Usage), ev.User
		u.Steps = 0 // a summary is no model turn
	case *event.ToolCompleted:
		if e.Writer != sessionlog.Sandbox || ev.DurationMS <= 0 {
			return nil, nil
		}
		u, user = policy.Usage{SandboxSeconds: float64(ev.DurationMS) / 1000}, ev.User
	default:
		return nil, nil
	}
	day := e.Event.Head().Time.UTC().Format(time.DateOnly)
	out := []spending{{bus.UsageKey(e.Tenant, day, ""), m.StreamSeq, u}}
	if user != "" {
		out = append(out, spending{bus.UsageKey(e.Tenant, day, user), m.StreamSeq, u})
	}
	return out, nil
}

// addUsage adds a batch's spending, in stream order, to the keys it names:
// to each, what came after the last event it counted.
func (c *usageCounter) addUsage(ctx context.Context, spent []spending) error {
	var keys []string
	byKey := make(map[string][]spending)
	for _, sp := range spent {
		if byKey[sp.key] == nil {
			keys = append(keys, sp.key)
		}
		byKey[sp.key] = append(byKey[sp.key], sp)
	}
	for _, key := range keys {
		if err := c.addToKey(ctx, key, byKey[key]); err != nil {
			return err
		}
	}
	return nil
}

func (c *usageCounter) addToKey(ctx context.Context, key string, spent []spending) error {
	for {
		k, ok := c.counted.Get(key)
		if !ok {
			u, rev, err := c.read(ctx, key)
			if err != nil {
				return err
			}
			k = countedUsage{u: u, rev: rev}
		}
		added := false
		for _, sp := range spent {
			if sp.seq > k.u.LastSeq {
				k.u.Add(sp.u)
				k.u.LastSeq, added = sp.seq, true
			}
		}
		if !added {
			return nil // counted before
		}
		data, err := json.Marshal(k.u)
		if err != nil {
			return err
		}
		rctx, cancel := bus.Bound(ctx)
		k.rev, err = bus.Swap(rctx, c.usage, key, data, k.rev)
		cancel()
		if err != nil {
			c.counted.Remove(key)
			if bus.Conflict(err) {
				continue // another counter wrote it: read it again
			}
			return fmt.Errorf("count usage %s: %w", key, err)
		}
		c.counted.Add(key, k)
		return nil
	}
}

// countedUsage is a usage key as the counter last wrote it.
type countedUsage struct {
	u   dayUsage
	rev uint64
}

// cursor returns the stream sequence of the last event counted, and the
// revision of the key that holds it (0 if none does).
func (c *usageCounter) cursor(ctx context.Context) (seq, rev uint64, err error) {
	rctx, cancel := bus.Bound(ctx)
	defer cancel()
	e, err := c.usage.Get(rctx, usageCursor)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("read the usage cursor: %w", err)
	}
	seq, err = strconv.ParseUint(string(e.Value()), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("read the usage cursor: %w", err)
	}
	return seq, e.Revision(), nil
}

// moveCursor records that every event up to seq is counted, unless
// another counter recorded more; it returns the key's revision.
func (c *usageCounter) moveCursor(ctx context.Context, seq, rev uint64) (uint64, error) {
	for {
		rctx, cancel := bus.Bound(ctx)
		r, err := bus.Swap(rctx, c.usage, usageCursor, []byte(strconv.FormatUint(seq, 10)), rev)
		cancel()
		if err == nil {
			return r, nil
		}
		if !bus.Conflict(err) {
			return 0, fmt.Errorf("move the usage cursor: %w", err)
		}
		at, r, err := c.cursor(ctx)
		if err != nil {
			return 0, err
		}
		if at >= seq {
			return r, nil
		}
		rev = r
	}
}
