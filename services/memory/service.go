package memory

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/lock"
	"corral.dev/pkg/metrics"
	"corral.dev/pkg/process"
	"corral.dev/pkg/sessionlog"
	"corral.dev/pkg/version"
)

// Service is the memory service.
type Service struct {
	cfg    Config
	js     jetstream.JetStream
	nc     *nats.Conn
	store  Store
	skills jetstream.ObjectStore
	log    *slog.Logger
	// logs records the calls' results in their sessions' logs, as the
	// memory service.
	logs *sessionlog.Log
	// publishing serialises the publishing of each tenant's skills.
	publishing lock.Keyed
	// calls times the tool calls, by tool and outcome.
	calls *prometheus.HistogramVec
}

// OpenStore returns the store cfg names: PostgreSQL, migrated to the latest
// schema, when DatabaseURL is set, and otherwise the KV store in js. close
// releases it.
func OpenStore(ctx context.Context, cfg Config, js jetstream.JetStream) (_ Store, close func(), err error) {
	if cfg.DatabaseURL == "" {
		s, err := NewKVStore(ctx, js)
		return s, func() {}, err
	}
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("connect to the database (DATABASE_URL): %w", err)
	}
	if err := Migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, nil, err
	}
	return NewPGStore(pool), pool.Close, nil
}

// Start returns the memory service cfg configures in the process env:
// connected as the memory service, answering from the store cfg names
// ([OpenStore]), which the process releases when it closes, and its
// metrics in the process's registry.
func Start(ctx context.Context, cfg Config, env *process.Env) (*Service, error) {
	js, err := env.Join(ctx, "memory")
	if err != nil {
		return nil, err
	}
	store, release, err := OpenStore(ctx, cfg, js)
	if err != nil {
		return nil, err
	}
	env.Defer(release)
	cfg.Metrics = env.Metrics
	return New(ctx, cfg, js, store, env.Log)
}

// New returns a memory service answering from store, using js, whose
// streams [bus.Setup] has created.
func New(ctx context.Context, cfg Config, js jetstream.JetStream, store Store, log *slog.Logger) (*Service, error) {
	skills, err := js.ObjectStore(ctx, bus.BucketSkills)
	if err != nil {
		return nil, fmt.Errorf("open object store %s: %w", bus.BucketSkills, err)
	}
	calls := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "corral_memory_call_seconds",
		Help:    "Tool calls on /memories and /skills and how long they took, by tool and outcome (ok, error).",
		Buckets: metrics.Seconds,
	}, []string{"tool", "outcome"})
	reg := cfg.Metrics
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	if err := reg.Register(calls); err != nil {
		return nil, err
	}
	if err := sessionlog.Register(reg); err != nil {
		return nil, err
	}
	log = log.With("service", "memory")
	logs := sessionlog.New(js, sessionlog.Options{As: sessionlog.Memory, Reader: "memory", DeadLetters: true, Logger: log})
	return &Service{cfg: cfg, js: js, nc: js.Conn(), store: store, skills: skills, log: log, logs: logs, calls: calls}, nil
}

// Run consumes memory tool calls and answers the CLI's requests and the
// harness's requests for previews until ctx is done, then lets running calls finish for a grace period.
func (s *Service) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return bus.Consume(ctx, s.js, bus.Consumer{
			Stream: bus.StreamTools,
			Config: jetstream.ConsumerConfig{
				Durable:       bus.ConsumerMemoryCalls,
				FilterSubject: bus.ToolFilter(bus.ServiceMemory),
			},
			Concurrency: s.cfg.Concurrency,
			Handler:     s.handleCall,
			OnGiveUp:    s.logs.GiveUpCall(bus.ServiceMemory, s.cfg.CallKey),
			AckDelay:    bus.ToolAckDelay,
			Grace:       s.cfg.ShutdownGrace,
			Logger:      s.log,
		})
	})
	g.Go(func() error { return s.serveAPI(ctx) })
	g.Go(func() error { return s.servePreviews(ctx) })
	store := "embedded"
	if _, ok := s.store.(*PGStore); ok {
		store = "postgres"
	}
	s.log.InfoContext(ctx, "memory started", "version", version.String(), "store", store)
	return g.Wait()
}
