package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/sessionlog"
)

// connect opens a client connection to the platform at url.
func (e *env) connect(url string) (*nats.Conn, jetstream.JetStream, error) {
	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	nc, err := bus.Connect(url, "corral", log, nats.Timeout(5*time.Second), bus.UserFromEnv(e.getenv))
	if err != nil {
		return nil, nil, fmt.Errorf("%w\nIs Corral running at %s? Start it with: corral dev; if it runs elsewhere (corral dev --listen), set CORRAL_NATS_URL (or --nats) to the URL its banner prints", err, url)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// checkPlatform fails with a clear message when the server has no Corral
// streams: a NATS server that is not (or not yet) running Corral. It asks
// for the last event of tenant, which a client's credential may read.
func checkPlatform(ctx context.Context, js jetstream.JetStream, url, tenant string) error {
	_, err := bus.LastBySubject(ctx, js, bus.StreamEvents, "events."+tenant+".>")
	switch {
	case err == nil, errors.Is(err, jetstream.ErrMsgNotFound):
		return nil
	case errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("the NATS server at %s is not running Corral (no %s stream, or no JetStream): set CORRAL_NATS_URL (or --nats) to the URL corral dev's banner prints, or start Corral with corral dev --listen on another port and point CORRAL_NATS_URL at it", url, bus.StreamEvents)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return fmt.Errorf("no answer from Corral at %s about tenant %s: is CORRAL_NATS_USER a credential of that tenant? (%w)", url, tenant, err)
	}
	return fmt.Errorf("look up Corral at %s: %w", url, err)
}

// sessionLog returns the Log a client reads session logs through: every
// event judged by its subject and writer before it is shown or counted,
// read as a client's permissions allow. A client writes nothing there (it
// publishes requests) and may not publish dead letters.
func (e *env) sessionLog(js jetstream.JetStream) *sessionlog.Log {
	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return sessionlog.New(js, sessionlog.Options{Reader: "client", Client: true, Logger: log})
}

// follow calls fn with each accepted event of sess's session stored after
// sequence after, until fn returns done or an error, or ctx is done. sess
// must have folded the log up to after (a fresh [sessionlog.NewSession]
// for 0), and learns from each event. pending is how many events of the
// session are stored after the one fn is given. Events the Log rejects are
// skipped (it counts and logs them). The ordered consumer behind it
// re-creates itself after a reconnect, so following rides through restarts
// of the server.
func follow(ctx context.Context, js jetstream.JetStream, l *sessionlog.Log, sess *sessionlog.Session, after uint64, fn func(e sessionlog.Entry, pending uint64) (done bool, err error)) error {
	cfg := jetstream.OrderedConsumerConfig{
		// One filter, which the consumer's create subject names: a
		// client's permissions allow no other.
		FilterSubjects: []string{bus.SessionEvents(sess.Tenant, sess.ID)},
		// Many clients come and go; the server forgets each one's
		// consumer soon after it stops pulling, not after the default
		// five minutes.
		InactiveThreshold: 5 * time.Second,
	}
	if after > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, after+1
	}
	cons, err := js.OrderedConsumer(ctx, bus.StreamEvents, cfg)
	if err != nil {
		return fmt.Errorf("follow session %s: %w", sess.ID, err)
	}
	it, err := cons.Messages(jetstream.PullHeartbeat(bus.PullHeartbeat))
	if err != nil {
		return fmt.Errorf("follow session %s: %w", sess.ID, err)
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
			return fmt.Errorf("follow session %s: %w", sess.ID, err)
		}
		meta, err := msg.Metadata()
		if err != nil {
			return fmt.Errorf("follow session %s: %w", sess.ID, err)
		}
		m := bus.FromDelivery(msg)
		e, err := l.Judge(ctx, m)
		if errors.Is(err, sessionlog.ErrRejected) {
			continue
		}
		if err != nil {
			return fmt.Errorf("session %s: %w", sess.ID, err)
		}
		if l.Admit(ctx, sess, e, m.Data) != nil {
			continue // a result of a call not dispatched to its writer
		}
		done, err := fn(e, meta.NumPending)
		if done || err != nil {
			return err
		}
	}
}

// eventJSON is an accepted event as --json prints it, encoded again from
// what was judged (for a large event, the event its stub stands for), as
// [writeJSONLines] writes, without its line break.
func eventJSON(e sessionlog.Entry) []byte {
	var b bytes.Buffer
	if err := writeJSONLines(&b, e.Event); err != nil {
		return fmt.Appendf(nil, `{"error":%q}`, err.Error())
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}
