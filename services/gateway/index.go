package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/model"
	"corral.dev/pkg/sessionindex"
	"corral.dev/pkg/sessionlog"
)

// index folds every session's log into the session index until ctx is
// done: a durable consumer of every session event, each session's handled
// one at a time. An event is folded in with every event of its session
// stored after the last one its entry folded, read from the log: so an
// event redelivered after a later one was handled is not lost, and none is
// folded twice.
func (s *Service) index(ctx context.Context) error {
	return bus.Consume(ctx, s.js, bus.Consumer{
		Stream: bus.StreamEvents,
		Config: jetstream.ConsumerConfig{
			Durable:       bus.ConsumerGatewayIndex,
			FilterSubject: "events.>",
		},
		Concurrency: s.cfg.Concurrency,
		Admit: func(m bus.Msg) (string, string) {
			tenant, session, err := bus.ParseSubject(m.Subject)
			if err != nil {
				return m.Subject, ""
			}
			return bus.SessionKey(tenant, session), tenant
		},
		Handler: s.fold,
		Logger:  s.log,
	})
}

// fold folds the event m into its session's entry.
func (s *Service) fold(ctx context.Context, m bus.Msg) error {
	a, err := sessionlog.ParseSubject(m.Subject)
	if err != nil {
		_, err = s.logs.Judge(ctx, m) // rejected: dead-lettered with its reason
		return err
	}
	key := sessionindex.Key(a.Tenant, a.Session)
	var cur sessionindex.Entry
	rev := uint64(0)
	kve, err := s.sessions.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		return fmt.Errorf("read index of %s: %w", key, err)
	default:
		if err := json.Unmarshal(kve.Value(), &cur); err != nil {
			return fmt.Errorf("index of %s: %w", key, err)
		}
		rev = kve.Revision()
	}
	if cur.Seq >= m.StreamSeq {
		return nil // folded with an event before it
	}
	stream, err := s.eventStream(ctx)
	if err != nil {
		return err
	}
	msgs, err := bus.ReadAfter(ctx, s.js, stream, bus.SessionEvents(a.Tenant, a.Session), cur.Seq)
	if err != nil {
		return err
	}
	next, folded := cur, false
	for _, msg := range msgs {
		en, err := s.logs.Judge(ctx, msg)
		if errors.Is(err, sessionlog.ErrRejected) {
			next.Seq = max(next.Seq, msg.StreamSeq)
			continue
		}
		if err != nil {
			return err
		}
		next, folded = sessionindex.Fold(next, en.Event, msg.StreamSeq, s.price), true
	}
	if !folded && rev == 0 {
		return nil // nothing of the session accepted: no entry for it
	}
	b, err := json.Marshal(next)
	if err != nil {
		return err
	}
	if rev == 0 {
		_, err = s.sessions.Create(ctx, key, b)
	} else {
		_, err = s.sessions.Update(ctx, key, b, rev)
	}
	if err != nil {
		// Another gateway indexed the session meanwhile: read again.
		return fmt.Errorf("index %s: %w", key, err)
	}
	return nil
}

// price prices a model response by the configured price table.
func (s *Service) price(modelName string, u model.Usage) float64 {
	return s.cfg.Prices.Cost(modelName, u)
}

// eventStream returns the EVENTS stream's handle, looked up once.
func (s *Service) eventStream(ctx context.Context) (jetstream.Stream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.events != nil {
		return s.events, nil
	}
	ctx, cancel := bus.Bound(ctx)
	defer cancel()
	st, err := s.js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		return nil, fmt.Errorf("open stream %s: %w", bus.StreamEvents, err)
	}
	s.events = st
	return st, nil
}
