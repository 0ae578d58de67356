// Command auth answers the NATS server's auth callout: it signs clients in
// with the credentials of the credentials bucket, and creates the
// consumers clients ask for, within bounds.
//
// It is configured from the environment: CORRAL_NATS_URL,
// CORRAL_NATS_USER, CORRAL_NATS_PASSWORD, CORRAL_AUTH_ISSUER_SEED,
// CORRAL_AUTH_TTL, CORRAL_AUTH_ACCOUNT, CORRAL_AUTH_MAX_CONSUMERS,
// CORRAL_AUTH_CONSUMER_IDLE, CORRAL_METRICS_LISTEN, CORRAL_LOG_LEVEL,
// CORRAL_LOG_FORMAT.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/logger"
	"corral.dev/pkg/metrics"
	"corral.dev/services/auth"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "auth:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, getenv func(string) string, stderr io.Writer) (err error) {
	log := logger.New(stderr, getenv("CORRAL_LOG_LEVEL"), getenv("CORRAL_LOG_FORMAT"))
	cfg, err := auth.LoadConfig(getenv)
	if err != nil {
		return err
	}
	reg := metrics.NewRegistry()
	cfg.Metrics = reg
	// Not bus.Join: its bus.Setup reads every stream, and the auth
	// service's NATS user may read the credentials bucket alone. corral
	// setup (as an administrator) creates the bucket.
	nc, err := bus.Connect(cfg.NATSURL, "auth", log, bus.UserFromEnv(getenv))
	if err != nil {
		return err
	}
	// Returns once what the service published is flushed.
	defer func() { err = errors.Join(err, bus.Drain(nc, bus.DrainTimeout)) }()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	svc, err := auth.New(ctx, cfg, js, log)
	if err != nil {
		return err
	}
	return metrics.With(ctx, getenv("CORRAL_METRICS_LISTEN"), reg, metrics.Connected(nc), log, svc.Run)
}
