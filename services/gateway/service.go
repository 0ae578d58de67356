// Package gateway is Corral's front door over HTTP. It keeps the session
// index (every session's status, user, model, turns, cost and title, folded
// from the session logs into the KV bucket sessions, which it alone may
// write), and serves the Managed Agents API as its official SDKs call it:
// agents, environments, sessions and their events, listed with cursors and
// streamed as server-sent events, mapped onto Corral.
//
// An API key is a Corral client credential. What a request asks for a
// tenant, the gateway does signed in to NATS as that credential, with the
// permissions the auth service gives it: a key sees and acts on its own
// tenant only, as the same credential would through corral or NATS.
package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
	"corral.dev/pkg/policy"
	"corral.dev/pkg/process"
	"corral.dev/pkg/sessionlog"
	"corral.dev/pkg/version"
)

// Service is the gateway.
type Service struct {
	cfg Config
	js  jetstream.JetStream
	log *slog.Logger
	// sessions is the session index, which the gateway writes.
	sessions jetstream.KeyValue
	// logs reads the session logs as the gateway, for the index.
	logs    *sessionlog.Log
	clients *clients
	// webhooks posts the tenants' webhooks and answers their API.
	webhooks *webhooks
	// folds keeps the API events of the sessions read lately.
	folds *foldCache
	// tracer exports the sessions' spans; nil when traces are off.
	tracer *tracer

	mu     sync.Mutex
	events jetstream.Stream
}

// Start returns the gateway cfg configures in the process env: signed in
// as the gateway for the index, and as clients for the API's keys, over
// the network to cfg.NATSURL even in a process that runs its server (a
// refused sign-in over an in-process connection is told only after a
// time-out, and a wrong key must be answered at once).
func Start(ctx context.Context, cfg Config, env *process.Env) (*Service, error) {
	js, err := env.Join(ctx, credential.UserGateway)
	if err != nil {
		return nil, err
	}
	cfg.Metrics = env.Metrics
	return New(ctx, cfg, js, nil, env.Log)
}

// New returns a gateway using js (the gateway's own connection), whose
// buckets [Setup] has created; clientOpts are the options of the
// connections it makes for API keys, to cfg.NATSURL. Settings left zero
// get [LoadConfig]'s defaults.
func New(ctx context.Context, cfg Config, js jetstream.JetStream, clientOpts []nats.Option, log *slog.Logger) (*Service, error) {
	sessions, err := js.KeyValue(ctx, bus.BucketSessions)
	if err != nil {
		return nil, fmt.Errorf("open kv %s: %w (corral setup makes it)", bus.BucketSessions, err)
	}
	log = log.With("service", "gateway")
	cfg.Heartbeat = cmp.Or(cfg.Heartbeat, 15*time.Second)
	cfg.KeyIdle = cmp.Or(cfg.KeyIdle, 5*time.Minute)
	cfg.MaxKeys = cmp.Or(cfg.MaxKeys, 1024)
	cfg.Concurrency = cmp.Or(cfg.Concurrency, 16)
	if cfg.Prices == nil {
		cfg.Prices = policy.Default()
	}
	s := &Service{
		cfg:      cfg,
		js:       js,
		log:      log,
		sessions: sessions,
		logs:     sessionlog.New(js, sessionlog.Options{Reader: "gateway", DeadLetters: true, Logger: log}),
		clients:  newClients(cfg.NATSURL, clientOpts, log, cfg.KeyIdle, cfg.MaxKeys),
		folds:    newFoldCache(defaultFoldBytes),
	}
	if cfg.Metrics != nil {
		if err := sessionlog.Register(cfg.Metrics); err != nil {
			return nil, err
		}
	}
	if s.webhooks, err = newWebhooks(ctx, js, cfg.Webhooks, s.logs, log); err != nil {
		return nil, err
	}
	if cfg.TracesEndpoint != "" {
		if s.tracer, err = newTracer(ctx, cfg.TracesEndpoint); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Run keeps the session index and serves the API until ctx is done.
func (s *Service) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.index(ctx) })
	g.Go(func() error { return s.webhooks.run(ctx) })
	if s.tracer != nil {
		g.Go(func() error { return s.exportTraces(ctx) })
	}
	if s.cfg.Listen != "" {
		g.Go(func() error { return s.clients.sweep(ctx) })
		g.Go(func() error { return s.serveHTTP(ctx) })
	}
	s.log.InfoContext(ctx, "gateway started", "version", version.String(), "listen", s.cfg.Listen)
	return g.Wait()
}

// httpServer returns the server of the API, whose requests' base is ctx.
// A connection waits at most connIdle for its next request: without it,
// one that is kept alive after a request (a refused key's, say) would be
// held open for good, and enough of them would take every descriptor the
// process has.
func (s *Service) httpServer(ctx context.Context) *http.Server {
	return &http.Server{
		Handler:           s.routes(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       connIdle,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
}

// connIdle is how long a kept-alive connection may wait for its next
// request: longer than an SDK keeps an idle connection in its pool.
const connIdle = 2 * time.Minute

// serveHTTP serves the API on cfg.Listen until ctx is done.
func (s *Service) serveHTTP(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", s.cfg.Listen, err)
	}
	srv := s.httpServer(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	// Streams end with ctx (their requests' base); the rest finish.
	err = srv.Shutdown(sctx)
	if serr := <-done; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}
