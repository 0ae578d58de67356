// Command approval keeps the calls Corral's policy holds for a person's
// approval, serves the reviewers' web page and signs their decisions.
//
// It is configured from the environment: CORRAL_NATS_URL,
// CORRAL_APPROVAL_SIGNING_KEY (or _FILE), CORRAL_APPROVAL_LISTEN,
// CORRAL_REVIEWER_TOKENS, CORRAL_REVIEWER_HEADER, CORRAL_APPROVAL_TIMEOUT,
// CORRAL_LOG_LEVEL.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/logger"
	"corral.dev/pkg/metrics"
	"corral.dev/services/approval"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "approval:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, getenv func(string) string) (err error) {
	log := logger.New(os.Stderr, getenv("CORRAL_LOG_LEVEL"), getenv("CORRAL_LOG_FORMAT"))
	cfg, err := approval.LoadConfig(getenv)
	if err != nil {
		return err
	}
	reg := metrics.NewRegistry()
	cfg.Metrics = reg
	nc, js, err := bus.Join(ctx, cfg.NATSURL, "approval", getenv, log)
	if err != nil {
		return err
	}
	// Returns once what the service published is flushed.
	defer func() { err = errors.Join(err, bus.Drain(nc, bus.DrainTimeout)) }()
	svc, err := approval.New(ctx, cfg, js, log)
	if err != nil {
		return err
	}
	return metrics.With(ctx, getenv("CORRAL_METRICS_LISTEN"), reg, metrics.Connected(nc), log, svc.Run)
}
