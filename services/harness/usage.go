package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/policy"
	"corral.dev/pkg/sessionlog"
)

// Daily usage is counted from the session logs into the usage bucket by
// one harness at a time: the holder of the key [usageCounter] in the
// leases bucket. It reads the model responses and sandbox results in
// stream order, from where counting last got to (the usage bucket's key
// [usageCursor]), a batch at a time, and adds each batch to its tenants'
// and users' days with one compare-and-set per key. Each key remembers
// the last event counted in it, and only later events are added to it:
// the counter that takes over after one that died, starting from the
// cursor it left, counts nothing twice, nor would two counters that
// overlapped for a moment.
const (
	usageCounter = "usage-counter"
	usageCursor  = "_counted"
)

// usageBatch bounds one batch of events counted; usageLinger is how long
// a batch waits for more events after its first.
const (
	usageBatch  = 1000
	usageLinger = 50 * time.Millisecond
)

// countUsage takes the counter's lease whenever it is free and counts
// until ctx is done.
func (s *Service) countUsage(ctx context.Context) error {
	me := []byte(s.cfg.Instance)
	for {
		rev, err := s.takeCounter(ctx, me)
		if err == nil {
			rev, err = s.count(ctx, rev)
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = s.leases.Delete(dctx, usageCounter, jetstream.LastRevision(rev))
			cancel()
		}
		if ctx.Err() != nil {
			return nil
		}
		if err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			s.log.WarnContext(ctx, "usage counter", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(bus.LeaseTTL / 2):
		}
	}
}

// takeCounter takes the counter's lease if no harness holds it.
func (s *Service) takeCounter(ctx context.Context, me []byte) (uint64, error) {
	rctx, cancel := bus.Bound(ctx)
	defer cancel()
	return s.leases.Create(rctx, usageCounter, me)
}

// count counts batches while it holds the counter's lease at revision
// rev, renewing it; it returns when ctx is done or the lease is lost, with
// the lease's last revision.
func (s *Service) count(ctx context.Context, rev uint64) (uint64, error) {
	// Cancelled on return, so that the consumer's callback, which may be
	// waiting to hand over an event, returns too.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	from, cursorRev, err := s.cursor(ctx)
	if err != nil {
		return rev, err
	}
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{
			sessionlog.KindFilter(event.TypeModelResponded),
			sessionlog.KindFilter(event.TypeToolCompleted),
		},
		InactiveThreshold: 5 * time.Second,
	}
	if from > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from+1
	}
	cons, err := s.js.OrderedConsumer(ctx, bus.StreamEvents, cfg)
	if err != nil {
		return rev, fmt.Errorf("read the session logs: %w", err)
	}
	// Events arrive as they are recorded; each batch is what has arrived
	// by the time the one before is counted.
	arrived := make(chan jetstream.Msg, usageBatch)
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		select {
		case arrived <- msg:
		case <-ctx.Done():
		}
	})
	if err != nil {
		return rev, fmt.Errorf("read the session logs: %w", err)
	}
	defer cc.Stop()
	renew := time.NewTicker(bus.LeaseTTL / 3)
	defer renew.Stop()
	moved, movedTo := time.Now(), from
	defer func() {
		if from > movedTo {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_, _ = s.moveCursor(dctx, from, cursorRev)
		}
	}()
	for {
		var batch []jetstream.Msg
		select {
		case <-ctx.Done():
			return rev, nil
		case <-renew.C:
			rctx, cancel := bus.Bound(ctx)
			r, err := s.leases.Update(rctx, usageCounter, []byte(s.cfg.Instance), rev)
			cancel()
			if err != nil {
				return rev, fmt.Errorf("renew the usage counter's lease: %w", err)
			}
			rev = r
			continue
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
				return rev, fmt.Errorf("read the session logs: %w", err)
			}
			sp, err := s.spending(ctx, bus.Msg{Subject: msg.Subject(), Data: msg.Data(), StreamSeq: meta.Sequence.Stream})
			if err != nil {
				return rev, err
			}
			spent = append(spent, sp...)
			last = meta.Sequence.Stream
		}
		if err := s.addUsage(ctx, spent); err != nil {
			return rev, err
		}
		from = last
		// The cursor only spares a counter that takes over some reading:
		// the keys know what they counted. It is moved once a second.
		if time.Since(moved) >= time.Second {
			if cursorRev, err = s.moveCursor(ctx, from, cursorRev); err != nil {
				return rev, err
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

// spending returns what m, a model response or a sandbox call, adds to
// its tenant's and user's days. An event the session log rejects (one
// the harness or the sandbox-manager did not write, or whose stored
// payload is missing) counts nothing, and counting goes on.
func (s *Service) spending(ctx context.Context, m bus.Msg) ([]spending, error) {
	e, err := s.logs.Judge(ctx, m)
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
		u, user = s.responseUsage(ev.Model, ev.Usage), ev.User
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
func (s *Service) addUsage(ctx context.Context, spent []spending) error {
	var keys []string
	byKey := make(map[string][]spending)
	for _, sp := range spent {
		if byKey[sp.key] == nil {
			keys = append(keys, sp.key)
		}
		byKey[sp.key] = append(byKey[sp.key], sp)
	}
	for _, key := range keys {
		if err := s.addToKey(ctx, key, byKey[key]); err != nil {
			return err
		}
	}
	return nil
}

func (s *Service) addToKey(ctx context.Context, key string, spent []spending) error {
	for {
		c, ok := s.counted.Get(key)
		if !ok {
			u, rev, err := s.dayUsage(ctx, key)
			if err != nil {
				return err
			}
			c = countedUsage{u: u, rev: rev}
		}
		added := false
		for _, sp := range spent {
			if sp.seq > c.u.LastSeq {
				c.u.Add(sp.u)
				c.u.LastSeq, added = sp.seq, true
			}
		}
		if !added {
			return nil // counted before
		}
		data, err := json.Marshal(c.u)
		if err != nil {
			return err
		}
		rctx, cancel := bus.Bound(ctx)
		c.rev, err = bus.Swap(rctx, s.usage, key, data, c.rev)
		cancel()
		if err != nil {
			s.counted.Remove(key)
			if bus.Conflict(err) {
				continue // another counter wrote it: read it again
			}
			return fmt.Errorf("count usage %s: %w", key, err)
		}
		s.counted.Add(key, c)
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
func (s *Service) cursor(ctx context.Context) (seq, rev uint64, err error) {
	rctx, cancel := bus.Bound(ctx)
	defer cancel()
	e, err := s.usage.Get(rctx, usageCursor)
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
func (s *Service) moveCursor(ctx context.Context, seq, rev uint64) (uint64, error) {
	for {
		rctx, cancel := bus.Bound(ctx)
		r, err := bus.Swap(rctx, s.usage, usageCursor, []byte(strconv.FormatUint(seq, 10)), rev)
		cancel()
		if err == nil {
			return r, nil
		}
		if !bus.Conflict(err) {
			return 0, fmt.Errorf("move the usage cursor: %w", err)
		}
		at, r, err := s.cursor(ctx)
		if err != nil {
			return 0, err
		}
		if at >= seq {
			return r, nil
		}
		rev = r
	}
}
