// Command harness runs Corral's agent loop against a NATS server.
//
// It is configured from the environment: CORRAL_NATS_URL, CORRAL_MODEL,
// OPENAI_API_KEY, OPENAI_BASE_URL, ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL,
// CORRAL_MAX_TURNS, CORRAL_MAX_TOKENS, CORRAL_CALL_SIGNING_KEY (or _FILE),
// CORRAL_APPROVAL_PUBLIC_KEY, CORRAL_LOG_LEVEL.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/logger"
	"corral.dev/pkg/metrics"
	"corral.dev/services/harness"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "harness:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, getenv func(string) string, stderr io.Writer) (err error) {
	log := logger.New(stderr, getenv("CORRAL_LOG_LEVEL"), getenv("CORRAL_LOG_FORMAT"))
	cfg, err := harness.LoadConfig(getenv)
	if err != nil {
		return err
	}
	reg := metrics.NewRegistry()
	cfg.Metrics = reg
	nc, js, err := bus.Join(ctx, cfg.NATSURL, "harness", getenv, log)
	if err != nil {
		return err
	}
	// Returns once what the service published is flushed.
	defer func() { err = errors.Join(err, bus.Drain(nc, bus.DrainTimeout)) }()
	svc, err := harness.New(ctx, cfg, js, log)
	if err != nil {
		return err
	}
	return metrics.With(ctx, getenv("CORRAL_METRICS_LISTEN"), reg, metrics.Connected(nc), log, svc.Run)
}
