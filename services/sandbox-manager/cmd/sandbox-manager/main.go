// Command sandbox-manager runs tool calls in bubblewrap sandboxes for Corral.
//
// It is configured from the environment: CORRAL_NATS_URL, CORRAL_DATA_DIR, CORRAL_BWRAP,
// CORRAL_SANDBOX_CONCURRENCY, CORRAL_SANDBOX_TIMEOUT, CORRAL_SANDBOX_FILE_TIMEOUT, CORRAL_CALL_PUBLIC_KEY,
// CORRAL_LOG_LEVEL.
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
	sandboxmanager "corral.dev/services/sandbox-manager"
)

func main() {
	sandboxmanager.RunExecutorIfRequested()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-manager:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, getenv func(string) string, stderr io.Writer) (err error) {
	log := logger.New(stderr, getenv("CORRAL_LOG_LEVEL"), getenv("CORRAL_LOG_FORMAT"))
	cfg, err := sandboxmanager.LoadConfig(getenv)
	if err != nil {
		return err
	}
	reg := metrics.NewRegistry()
	cfg.Metrics = reg
	nc, js, err := bus.Join(ctx, cfg.NATSURL, "sandbox-manager", getenv, log)
	if err != nil {
		return err
	}
	// Returns once what the service published is flushed.
	defer func() { err = errors.Join(err, bus.Drain(nc, bus.DrainTimeout)) }()
	svc, err := sandboxmanager.New(ctx, cfg, js, log)
	if err != nil {
		return err
	}
	return metrics.With(ctx, getenv("CORRAL_METRICS_LISTEN"), reg, metrics.Connected(nc), log, svc.Run)
}
