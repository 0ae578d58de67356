package sandboxmanager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/lease"
)

// Placement: a session's sandbox lives on one node. Any node may receive a
// session's call from the shared queue; the first to receive one places
// the session on itself in [bus.BucketPlacements]. A node that receives a
// call of a session placed on another live node forwards it there
// ([bus.NodeSubject]) and holds the call's durable message until the owner
// replies that the result is recorded, so a death on either side loses
// nothing. A node is live while its lease in [bus.BucketNodes] is; once a
// dead node's lease runs out, the next node to receive one of its
// sessions' calls takes the session over (compare-and-set on the
// placement's revision) and restores its workspace from the last snapshot.

// placement is a node's view of the placements.
type placement struct {
	node     string
	instance string
	nodes    lease.Bucket
	places   jetstream.KeyValue
	log      *slog.Logger

	// forget is called with the [bus.SessionKey] of each session placed
	// here afresh: whatever this node knew of its workspace may be out of
	// date.
	forget func(key string)

	mu sync.Mutex
	// owned are the sessions placed here, by [bus.SessionKey], known
	// without asking the bucket while the lease is surely held, with the
	// revision of their placement; cleared when it may have lapsed.
	owned map[string]uint64
	// lease is the node's lease in [bus.BucketNodes]; remake is set when
	// it is to be made anew (it ran out).
	lease  *lease.Lease
	remake bool
}

func newPlacement(ctx context.Context, js jetstream.JetStream, node, instance string, forget func(key string), log *slog.Logger) (*placement, error) {
	nodes, err := js.KeyValue(ctx, bus.BucketNodes)
	if err != nil {
		return nil, fmt.Errorf("open kv %s: %w", bus.BucketNodes, err)
	}
	places, err := js.KeyValue(ctx, bus.BucketPlacements)
	if err != nil {
		return nil, fmt.Errorf("open kv %s: %w", bus.BucketPlacements, err)
	}
	p := &placement{
		node: node, instance: instance, nodes: lease.Bucket{KV: nodes, TTL: bus.NodeLeaseTTL}, places: places,
		forget: forget, log: log, owned: make(map[string]uint64), remake: true,
	}
	if err := p.renew(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// renew renews the node's lease. The renewal names the lease's revision,
// so a lease that ran out (and that another node may have acted on) is
// noticed: everything owned is then looked up again, and the lease made
// anew at the next renewal.
func (p *placement) renew(ctx context.Context) error {
	rctx, cancel := bus.Bound(ctx)
	defer cancel()
	p.mu.Lock()
	l, remake := p.lease, p.remake
	p.mu.Unlock()
	if remake {
		l, err := p.nodes.Put(rctx, p.node, []byte(p.instance))
		if err != nil {
			return fmt.Errorf("renew the lease of node %s: %w", p.node, err)
		}
		p.mu.Lock()
		p.lease, p.remake = l, false
		p.mu.Unlock()
		return nil
	}
	err := l.Renew(rctx)
	if errors.Is(err, lease.ErrLost) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.lapsed()
		return fmt.Errorf("the lease of node %s ran out", p.node)
	}
	if err != nil {
		return fmt.Errorf("renew the lease of node %s: %w", p.node, err)
	}
	return nil
}

// lapsed forgets the sessions owned: another node may have taken any of
// them over. The caller holds p.mu.
func (p *placement) lapsed() {
	for key := range p.owned {
		p.forget(key)
	}
	clear(p.owned)
	p.remake = true
}

// keepAlive renews the node's lease until ctx is done, then gives it up,
// so that the node's sessions move at once.
func (p *placement) keepAlive(ctx context.Context) {
	tick := time.NewTicker(bus.NodeLeaseTTL / 4)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			p.mu.Lock()
			l := p.lease
			p.mu.Unlock()
			dctx, cancel := bus.Bound(context.WithoutCancel(ctx))
			_ = l.Delete(dctx)
			cancel()
			return
		case <-tick.C:
		}
		if err := p.renew(ctx); err != nil && ctx.Err() == nil {
			p.log.WarnContext(ctx, "node lease", "err", err)
		}
	}
}

// sure reports whether the lease is surely held for a while yet. The
// caller holds p.mu.
func (p *placement) sure() bool {
	return p.lease.Sure()
}

// owns reports whether the session whose [bus.SessionKey] is key is
// placed here, as far as this node surely knows.
func (p *placement) owns(key string) bool {
	_, ok := p.ownedAt(key)
	return ok
}

// ownedAt returns the revision of the placement here of the session whose
// [bus.SessionKey] is key, if it is placed here as far as this node surely
// knows.
func (p *placement) ownedAt(key string) (uint64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	rev, ok := p.owned[key]
	return rev, ok && p.sure()
}

// placed is where a session's call runs: owner is "" here, or the live
// node the session is placed on. fresh reports that the session was not
// known to be here before this call (placed here now, or after a restart
// or a lapse of the node's lease), so its workspace must be checked
// against its snapshot; rev is the revision of its placement here.
type placed struct {
	owner string
	fresh bool
	rev   uint64
}

// route returns where a session's call runs.
func (p *placement) route(ctx context.Context, tenant string, session uuid.UUID) (placed, error) {
	owned := bus.SessionKey(tenant, session)
	if rev, ok := p.ownedAt(owned); ok {
		return placed{rev: rev}, nil
	}
	key := bus.PlacementKey(tenant, session)
	rctx, cancel := bus.Bound(ctx)
	defer cancel()
	for range 5 {
		var rev uint64
		e, err := p.places.Get(rctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			rev, err = p.places.Create(rctx, key, []byte(p.node))
		case err != nil:
		case string(e.Value()) == p.node:
			rev = e.Revision()
		default:
			owner := string(e.Value())
			_, lerr := p.nodes.KV.Get(rctx, owner)
			switch {
			case lerr == nil:
				return placed{owner: owner}, nil
			case !errors.Is(lerr, jetstream.ErrKeyNotFound):
				return placed{}, fmt.Errorf("look up node %s: %w", owner, lerr)
			}
			// Its node is gone: take the session over.
			rev, err = p.places.Update(rctx, key, []byte(p.node), e.Revision())
			if err == nil {
				p.log.InfoContext(ctx, "session taken over from a node that is gone", "session", session, "from", owner)
			}
		}
		if bus.Conflict(err) {
			continue // placed elsewhere meanwhile: look again
		}
		if err != nil {
			return placed{}, fmt.Errorf("place session %s: %w", session, err)
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if !p.sure() {
			return placed{}, bus.NotYet(time.Second, fmt.Errorf("place session %s: node %s is renewing its lease", session, p.node))
		}
		if _, ok := p.owned[owned]; !ok {
			p.forget(owned)
		}
		p.owned[owned] = rev
		return placed{fresh: true, rev: rev}, nil
	}
	return placed{}, bus.NotYet(0, fmt.Errorf("place session %s: its placement keeps changing", session))
}

// release forgets a session placed here, and its placement.
func (p *placement) release(ctx context.Context, tenant string, session uuid.UUID) {
	p.mu.Lock()
	delete(p.owned, bus.SessionKey(tenant, session))
	p.mu.Unlock()
	key := bus.PlacementKey(tenant, session)
	rctx, cancel := bus.Bound(ctx)
	defer cancel()
	if e, err := p.places.Get(rctx, key); err == nil && string(e.Value()) == p.node {
		_ = p.places.Delete(rctx, key, jetstream.LastRevision(e.Revision()))
	}
}

// live reports whether node's lease is held.
func (p *placement) live(ctx context.Context, node string) bool {
	rctx, cancel := bus.Bound(ctx)
	defer cancel()
	_, err := p.nodes.KV.Get(rctx, node)
	return err == nil
}

// A forwarded call's reply: empty when the result is recorded.
type forwardReply struct {
	Error string `json:"error,omitempty"`
	// Retry asks the forwarder to have the call delivered again soon,
	// without counting it as a failure: the session moved, or the owner
	// is busy or shutting down.
	Retry bool `json:"retry,omitempty"`
	// Permanent says no delivery can succeed: the call is given up.
	Permanent bool `json:"permanent,omitempty"`
}

// Headers of a forwarded call: its delivery count, and the subject it was
// delivered on, which alone says whose call it is.
const (
	deliveredHeader = "Corral-Delivered"
	subjectHeader   = "Corral-Subject"
)

// forward has owner run the call and waits until it has recorded the
// result. While it waits it watches the owner's lease: if the owner dies,
// the call is delivered again, and lands on whichever node takes the
// session over.
func (s *Service) forward(ctx context.Context, owner string, m bus.Msg) error {
	msg := nats.NewMsg(bus.NodeSubject(owner))
	msg.Data = m.Data
	msg.Header.Set(deliveredHeader, strconv.FormatUint(m.Delivered, 10))
	msg.Header.Set(subjectHeader, m.Subject)
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type answer struct {
		msg *nats.Msg
		err error
	}
	done := make(chan answer, 1)
	go func() {
		r, err := s.js.Conn().RequestMsgWithContext(fctx, msg)
		done <- answer{r, err}
	}()
	// The owner runs the call: this node only waits, holding the
	// session's turn here (its later calls wait behind this one) but no
	// slot.
	bus.Yield(ctx)
	tick := time.NewTicker(bus.NodeLeaseTTL / 3)
	defer tick.Stop()
	for {
		select {
		case a := <-done:
			if a.err != nil {
				// No answer: the owner is starting, stopping or cut
				// off. Delivered again, the call goes to whichever node
				// holds the session by then.
				return bus.NotYet(bus.NodeLeaseTTL/3, fmt.Errorf("forward to node %s: %w", owner, a.err))
			}
			var r forwardReply
			if err := json.Unmarshal(a.msg.Data, &r); err != nil {
				return fmt.Errorf("forward to node %s: bad reply: %w", owner, err)
			}
			switch {
			case r.Error == "":
				s.metrics.forwarded.Inc()
				return nil
			case r.Retry:
				return bus.NotYet(time.Second, fmt.Errorf("node %s: %s", owner, r.Error))
			case r.Permanent:
				return bus.Permanent(fmt.Errorf("node %s: %s", owner, r.Error))
			}
			return fmt.Errorf("node %s: %s", owner, r.Error)
		case <-tick.C:
			if !s.place.live(ctx, owner) {
				return bus.NotYet(0, fmt.Errorf("node %s died running the call", owner))
			}
		}
	}
}

// serveForwarded runs the calls other nodes forward here until ctx is
// done; calls still running then get the shutdown grace period.
func (s *Service) serveForwarded(ctx context.Context) error {
	base, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	var wg sync.WaitGroup
	sub, err := s.js.Conn().Subscribe(bus.NodeSubject(s.place.node), func(msg *nats.Msg) {
		reply := func(r forwardReply) {
			b, _ := json.Marshal(r)
			_ = msg.Respond(b)
		}
		if ctx.Err() != nil {
			reply(forwardReply{Error: "shutting down", Retry: true})
			return
		}
		if s.gate.Waiting() >= maxWaiting(s.cfg.Concurrency) {
			reply(forwardReply{Error: "busy", Retry: true})
			return
		}
		delivered, _ := strconv.ParseUint(msg.Header.Get(deliveredHeader), 10, 64)
		m := bus.Msg{Subject: msg.Header.Get(subjectHeader), Data: msg.Data, Delivered: delivered}
		// In line with the calls taken from the queue here: its session's
		// calls one at a time and in order, its tenant's bounded.
		key, group := bus.BySession(m)
		t := s.gate.Enter(key, group)
		wg.Go(func() {
			if err := t.Wait(ctx); err != nil {
				reply(forwardReply{Error: "shutting down", Retry: true})
				return
			}
			defer t.Done()
			err := s.runForwarded(base, m)
			switch {
			case err == nil:
				reply(forwardReply{})
			case errors.Is(err, bus.ErrNotYet):
				reply(forwardReply{Error: err.Error(), Retry: true})
			case errors.Is(err, bus.ErrPermanent), errors.Is(err, bus.ErrRejected):
				reply(forwardReply{Error: err.Error(), Permanent: true})
			default:
				reply(forwardReply{Error: err.Error()})
			}
		})
	})
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", bus.NodeSubject(s.place.node), err)
	}
	<-ctx.Done()
	_ = sub.Unsubscribe()
	grace := time.AfterFunc(s.cfg.ShutdownGrace, cancel)
	defer grace.Stop()
	wg.Wait()
	return nil
}

// maxWaiting bounds the calls waiting for their turn on a node before it
// answers forwarded ones that it is busy: they are taken again from the
// queue a moment later.
func maxWaiting(concurrency int) int { return max(1024, 16*concurrency) }

// maxSessionWaiting bounds the calls of one session waiting on a node for
// their turn: one more is answered with an error result (busy) at once,
// rather than kept among the node's pending calls (see
// [bus.Consumer.MaxKeyWaiting]), which a turn of hundreds of calls behind
// a long one would take from every other tenant.
const maxSessionWaiting = 64

// runForwarded runs a call another node forwarded here, if the session is
// still placed here. The call is checked against the subject it was
// delivered on, as the forwarder checked it.
func (s *Service) runForwarded(ctx context.Context, m bus.Msg) error {
	c, err := bus.DecodeToolCall(m, s.cfg.CallKey)
	if err != nil {
		return err
	}
	at, err := s.place.route(ctx, c.Tenant, c.Session)
	if err != nil {
		return err
	}
	if at.owner != "" {
		return bus.NotYet(0, fmt.Errorf("session %s is placed on node %s", c.Session, at.owner))
	}
	return s.runHere(ctx, c, m.Delivered > 1, at)
}
