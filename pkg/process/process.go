// Package process is where a process composes Corral's services: one
// service as a binary of its own ([Main]), or every service in one
// process, as corral dev runs them. Each service offers a start function
// that takes its configuration and the process's [Env]: the environment,
// the logger, the metrics registry and the connections to NATS, which the
// process drains once its services have stopped. The process alone
// decides how those connections are made: to the server named by the
// environment, or to a server in the process.
package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
	"corral.dev/pkg/envconf"
	"corral.dev/pkg/logger"
	"corral.dev/pkg/metrics"
)

// Runner is a started service: Run serves until ctx is done, then
// returns once the service has stopped.
type Runner interface {
	Run(ctx context.Context) error
}

// Env is what a process gives each service it runs. A service's start
// function connects through it, registers its metrics in Metrics, and
// leaves the connections to the process, which drains them in
// [Env.Close].
type Env struct {
	// Getenv is the process's environment.
	Getenv func(string) string
	// Log is the process's logger.
	Log *slog.Logger
	// Metrics is the process's registry, which one HTTP server serves.
	Metrics *prometheus.Registry
	// ClientOptions are the options of the connections a service makes
	// as a client, signed in with a client's credential (the Slack
	// bridge's) rather than as the service.
	ClientOptions []nats.Option

	connect func(name string) (*nats.Conn, error)
	// join connects and sets up the streams and buckets; nil when the
	// process has set them up itself, and join is connect.
	join func(ctx context.Context, name string) (*nats.Conn, jetstream.JetStream, error)

	mu       sync.Mutex
	conns    []*nats.Conn
	releases []func() error
}

// NewEnv returns the Env of a process that runs several services, whose
// connections connect makes (signed in as the named service), and which
// sets up the streams and buckets itself before it starts them.
func NewEnv(getenv func(string) string, log *slog.Logger, reg *prometheus.Registry, connect func(name string) (*nats.Conn, error)) *Env {
	return &Env{Getenv: getenv, Log: log, Metrics: reg, connect: connect}
}

// Standalone returns the Env of a process that runs a service on its
// own, configured by getenv: its connections go to CORRAL_NATS_URL (or
// [envconf.DefaultNATSURL]) signed in as CORRAL_NATS_USER, and
// [Env.Join] sets up the streams and buckets with the options the
// environment asks for ([bus.Join]). It has a metrics registry of its
// own.
func Standalone(getenv func(string) string, log *slog.Logger) *Env {
	url := envconf.NATSURL(getenv)
	return &Env{
		Getenv:  getenv,
		Log:     log,
		Metrics: metrics.NewRegistry(),
		connect: func(name string) (*nats.Conn, error) {
			return bus.Connect(url, name, log, bus.UserFromEnv(getenv))
		},
		join: func(ctx context.Context, name string) (*nats.Conn, jetstream.JetStream, error) {
			// It sets up what its user may read (all of it on a server
			// without users).
			return bus.Join(ctx, url, name, getenv, log, bus.Reading(credential.Reads(getenv("CORRAL_NATS_USER"))))
		},
	}
}

// Connect connects to NATS as the service name. The process drains the
// connection when it closes.
func (e *Env) Connect(name string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := e.connect(name)
	if err != nil {
		return nil, nil, err
	}
	e.Adopt(nc)
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, nil, err
	}
	return nc, js, nil
}

// Join is [Env.Connect] for a service that may set up the streams and
// buckets: a process running it alone sets them up ([bus.Setup]) with the
// options the environment asks for, as every service does at start-up so
// that none waits for another.
func (e *Env) Join(ctx context.Context, name string) (jetstream.JetStream, error) {
	if e.join == nil {
		_, js, err := e.Connect(name)
		return js, err
	}
	nc, js, err := e.join(ctx, name)
	if err != nil {
		return nil, err
	}
	e.Adopt(nc)
	return js, nil
}

// Adopt has the process drain nc, a connection a service made itself, and
// count it in the process's health.
func (e *Env) Adopt(nc *nats.Conn) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.conns = append(e.conns, nc)
	e.releases = append(e.releases, func() error { return bus.Drain(nc, bus.DrainTimeout) })
}

// Defer has the process call release when it closes, before it drains the
// connections made before the call to Defer: a service's store, say.
func (e *Env) Defer(release func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.releases = append(e.releases, func() error { release(); return nil })
}

// Healthy returns nil when every connection of the process is connected:
// a service that cannot reach the bus is not healthy.
func (e *Env) Healthy() error {
	e.mu.Lock()
	conns := e.conns
	e.mu.Unlock()
	return metrics.Connected(conns...)()
}

// Close releases what the services took, last first, once they have
// stopped: each connection drained (what it published flushed) and
// waited for. It returns what went wrong.
func (e *Env) Close() error {
	e.mu.Lock()
	releases := e.releases
	e.releases, e.conns = nil, nil
	e.mu.Unlock()
	var errs []error
	for i := len(releases) - 1; i >= 0; i-- {
		errs = append(errs, releases[i]())
	}
	return errors.Join(errs...)
}

// Main runs the service name as this process: its configuration loaded
// from the environment by load, started by start, and run until SIGINT or
// SIGTERM (see [Run]). It exits with status 1, saying why, if the service
// fails.
func Main[C any, S Runner](name string, load func(getenv func(string) string) (C, error), start func(context.Context, C, *Env) (S, error)) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := Run(ctx, os.Getenv, os.Stderr, load, start); err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		stop()
		os.Exit(1)
	}
}

// Run runs a service until ctx is done: it builds the logger
// (CORRAL_LOG_LEVEL, CORRAL_LOG_FORMAT, to stderr), loads the
// configuration, starts the service with an [Env] whose connections go to
// CORRAL_NATS_URL signed in as CORRAL_NATS_USER, serves the metrics and
// health on CORRAL_METRICS_LISTEN when it is set, and returns once what
// the service published is flushed.
func Run[C any, S Runner](ctx context.Context, getenv func(string) string, stderr io.Writer, load func(getenv func(string) string) (C, error), start func(context.Context, C, *Env) (S, error)) (err error) {
	log := logger.New(stderr, getenv("CORRAL_LOG_LEVEL"), getenv("CORRAL_LOG_FORMAT"))
	cfg, err := load(getenv)
	if err != nil {
		return err
	}
	env := Standalone(getenv, log)
	// Returns once what the service published is flushed.
	defer func() { err = errors.Join(err, env.Close()) }()
	svc, err := start(ctx, cfg, env)
	if err != nil {
		return err
	}
	return metrics.With(ctx, getenv("CORRAL_METRICS_LISTEN"), env.Metrics, env.Healthy, log, svc.Run)
}

// Component is a service as a process composes it: configured from the
// environment of the process's Env, and started in it.
type Component func(ctx context.Context, env *Env) (Runner, error)

// Of returns the Component of a service's load and start functions, the
// two that [Main] takes.
func Of[C any, S Runner](load func(getenv func(string) string) (C, error), start func(context.Context, C, *Env) (S, error)) Component {
	return func(ctx context.Context, env *Env) (Runner, error) {
		cfg, err := load(env.Getenv)
		if err != nil {
			return nil, err
		}
		return start(ctx, cfg, env)
	}
}
