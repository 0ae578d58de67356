package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
)

// connect opens a client connection to the platform at url.
func (e *env) connect(url string) (*nats.Conn, jetstream.JetStream, error) {
	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	nc, err := bus.Connect(url, "corral", log, nats.Timeout(5*time.Second), bus.UserFromEnv(e.getenv))
	if err != nil {
		return nil, nil, fmt.Errorf("%w\nIs Corral running? Start it with: corral dev (or set --nats / CORRAL_NATS_URL)", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// checkPlatform fails with a clear message when the server has no Corral
// streams: a NATS server that is not (or not yet) running Corral.
func checkPlatform(ctx context.Context, js jetstream.JetStream, url string) error {
	_, err := js.Stream(ctx, bus.StreamEvents)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return fmt.Errorf("the NATS server at %s is not running Corral (no %s stream); start Corral with: corral dev", url, bus.StreamEvents)
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("the NATS server at %s has no JetStream, so it is not Corral; start Corral with: corral dev (on another --listen port if this one is taken)", url)
	case err != nil:
		return fmt.Errorf("look up Corral at %s: %w", url, err)
	}
	return nil
}

// follow calls fn with each event of the session, from the first, until fn
// returns done or an error, or ctx is done. seq is the event's stream
// sequence, pending how many events of the session are stored after it. The ordered consumer behind it
// re-creates itself after a reconnect, so following rides through restarts
// of the server.
func follow(ctx context.Context, js jetstream.JetStream, tenant string, session uuid.UUID, fn func(ev any, raw []byte, seq, pending uint64) (done bool, err error)) error {
	cons, err := js.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.SessionEvents(tenant, session)},
		// Many clients come and go; the server forgets each one's
		// consumer soon after it stops pulling, not after the default
		// five minutes.
		InactiveThreshold: 5 * time.Second,
	})
	if err != nil {
		return fmt.Errorf("follow session %s: %w", session, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("follow session %s: %w", session, err)
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	for {
		msg, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("follow session %s: %w", session, err)
		}
		data, err := bus.Resolve(ctx, js, msg.Data())
		if err != nil {
			return fmt.Errorf("session %s: %w", session, err)
		}
		ev, err := event.Parse(data)
		if err != nil {
			return fmt.Errorf("session %s: %w", session, err)
		}
		var seq, pending uint64
		if meta, err := msg.Metadata(); err == nil {
			seq, pending = meta.Sequence.Stream, meta.NumPending
		}
		done, err := fn(ev, data, seq, pending)
		if done || err != nil {
			return err
		}
	}
}
