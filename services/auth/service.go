// Package auth is Corral's auth service: the NATS server's auth callout
// for client connections. The server asks it about every connection of a
// user it does not sign in itself (the services and the admin it does);
// the service looks the user name up as a credential ID in the
// credentials bucket, checks the password against the credential's
// secret, and answers with a user signed by its issuer key that holds the
// subjects [credential.Credential.Permissions] grants, and expires after
// [Config.TTL]. An expired user is cut off; its client reconnects and is
// asked about again, so a revoked credential stops working within the TTL.
//
// It is also the gate through which clients create consumers (gate.go).
package auth

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
	"corral.dev/pkg/process"
	"corral.dev/pkg/version"
)

// Subject is where the NATS server asks about a connection.
const Subject = "$SYS.REQ.USER.AUTH"

// Queue is the queue group of the auth service's instances: each
// question is answered by one.
const Queue = "corral-auth"

// answerTimeout bounds the answer to one question: the server waits
// [credential.AuthTimeout] (the authorization timeout of deploy/nats.conf),
// and nobody listens after that.
const answerTimeout = credential.AuthTimeout - 500*time.Millisecond

// shutdownTimeout bounds Run's wait for the questions in hand.
const shutdownTimeout = 20 * time.Second

// Service is the auth service.
type Service struct {
	cfg Config
	nc  *nats.Conn
	kv  jetstream.KeyValue
	log *slog.Logger
	// decisions counts answers by outcome: allowed, denied.
	decisions *prometheus.CounterVec
	// gated counts clients' requests for a consumer by outcome: created,
	// refused.
	gated *prometheus.CounterVec
	// ready is closed once Run takes questions.
	ready chan struct{}
}

// Ready returns a channel closed once [Service.Run] takes the server's
// questions: clients may sign in from then on.
func (s *Service) Ready() <-chan struct{} { return s.ready }

// Start returns the auth service cfg configures in the process env:
// connected as the auth service, its metrics in the process's registry.
func Start(ctx context.Context, cfg Config, env *process.Env) (*Service, error) {
	// Connected, not joined: setting up reads every stream, and the auth
	// service's NATS user may read the credentials bucket alone. corral
	// setup (as an administrator) creates the bucket.
	_, js, err := env.Connect("auth")
	if err != nil {
		return nil, err
	}
	cfg.Metrics = env.Metrics
	return New(ctx, cfg, js, env.Log)
}

// New returns an auth service reading the credentials bucket through js,
// and answering on js's connection, which the caller drains when Run has
// returned. The bucket must exist: [bus.Setup], as run by corral setup,
// creates it; the auth service's own NATS user may not.
func New(ctx context.Context, cfg Config, js jetstream.JetStream, log *slog.Logger) (*Service, error) {
	if cfg.Issuer == nil {
		return nil, errors.New("auth: no issuer key (CORRAL_AUTH_ISSUER_SEED)")
	}
	if cfg.TTL < MinTTL {
		return nil, fmt.Errorf("auth: TTL %s: want at least %s", cfg.TTL, MinTTL)
	}
	if cfg.Account == "" {
		cfg.Account = DefaultAccount
	}
	cfg.Workers = max(cfg.Workers, 1)
	cfg.MaxConsumers = cmp.Or(cfg.MaxConsumers, DefaultMaxConsumers)
	cfg.ConsumerIdle = cmp.Or(cfg.ConsumerIdle, DefaultConsumerIdle)
	kv, err := js.KeyValue(ctx, bus.BucketCredentials)
	if err != nil {
		return nil, fmt.Errorf("open kv %s (corral setup creates it): %w", bus.BucketCredentials, err)
	}
	s := &Service{
		cfg:   cfg,
		nc:    js.Conn(),
		kv:    kv,
		log:   log.With("service", "auth"),
		ready: make(chan struct{}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "corral_auth_decisions_total",
			Help: "Client connections the auth service answered, by outcome (allowed, denied).",
		}, []string{"outcome"}),
		gated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "corral_auth_consumers_total",
			Help: "Clients' requests for a consumer, by outcome (created, refused).",
		}, []string{"outcome"}),
	}
	if cfg.Metrics != nil {
		for _, c := range []prometheus.Collector{s.decisions, s.gated} {
			if err := cfg.Metrics.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

// Run answers the server's questions until ctx is done. It then stops
// taking questions, answers those it holds, and returns.
func (s *Service) Run(ctx context.Context) error {
	// Channels rather than callbacks: the questions are answered by
	// Workers goroutines at once, each waiting on a bucket read, and a
	// server restarting sends every client's at once. The gate's
	// requests, which any client can send and each of which lists a
	// stream's consumers, have their own channel and a quarter of the
	// workers: however many a client sends, sign-ins never wait behind
	// them.
	signIns, gated := make(chan *nats.Msg, 4096), make(chan *nats.Msg, 256)
	var subs []*nats.Subscription
	for subject, ch := range map[string]chan *nats.Msg{Subject: signIns, bus.ConsumerGate + ">": gated} {
		sub, err := s.nc.ChanQueueSubscribe(subject, Queue, ch)
		if err != nil {
			unsubscribe(subs)
			return fmt.Errorf("subscribe %s: %w", subject, err)
		}
		subs = append(subs, sub)
	}
	fctx, cancel := bus.Bound(ctx)
	err := s.nc.FlushWithContext(fctx)
	cancel()
	if err != nil && ctx.Err() == nil {
		unsubscribe(subs)
		return fmt.Errorf("subscribe %s: %w", Subject, err)
	}
	s.log.InfoContext(ctx, "auth started", "version", version.String(), "issuer", s.cfg.Issuer, "account", s.cfg.Account, "ttl", s.cfg.TTL)
	close(s.ready)

	// The answers outlive ctx: a question taken is answered, not dropped
	// on the way out.
	actx := context.WithoutCancel(ctx)
	var wg sync.WaitGroup
	serve := func(n int, ch <-chan *nats.Msg, handle func(context.Context, *nats.Msg)) {
		for range n {
			wg.Go(func() {
				for m := range ch {
					handle(actx, m)
				}
			})
		}
	}
	serve(s.cfg.Workers, signIns, s.answer)
	serve(max(1, s.cfg.Workers/4), gated, s.gate)

	<-ctx.Done()
	// Drain: the server stops sending, and what it sent arrives. Then
	// nothing writes to msgs any more (a drained, unsubscribed or closed
	// subscription is not written to), and it can be closed.
	var errs []error
	for _, sub := range subs {
		if err := sub.Drain(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			errs = append(errs, fmt.Errorf("drain %s: %w", sub.Subject, err))
		}
	}
	for _, sub := range subs {
		if !drained(sub, shutdownTimeout) {
			errs = append(errs, fmt.Errorf("drain %s: not done after %s", sub.Subject, shutdownTimeout))
		}
	}
	unsubscribe(subs)
	close(signIns)
	close(gated)
	wg.Wait()
	s.log.InfoContext(actx, "auth stopped")
	return errors.Join(errs...)
}

// unsubscribe unsubscribes subs, which may be closed already.
func unsubscribe(subs []*nats.Subscription) {
	for _, sub := range subs {
		_ = sub.Unsubscribe()
	}
}

// drained waits until sub, draining, is done (as it is when its connection
// closed), for at most timeout, and reports whether it is. A subscription
// tells of a drain done, but not of its connection closing: it is asked.
func drained(sub *nats.Subscription, timeout time.Duration) bool {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(timeout)
	for sub.IsValid() {
		select {
		case <-tick.C:
		case <-deadline:
			return false
		}
	}
	return true
}
