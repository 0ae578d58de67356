// Command memory keeps Corral's /memories and /skills.
//
// It is configured from the environment: CORRAL_NATS_URL, DATABASE_URL
// (PostgreSQL; without it, files are kept in a JetStream KV bucket),
// CORRAL_MEMORY_MAX_FILE_BYTES, CORRAL_MEMORY_MAX_FILES,
// CORRAL_MEMORY_CONCURRENCY, CORRAL_MEMORY_CALL_TIMEOUT, CORRAL_SHUTDOWN_GRACE, CORRAL_CALL_PUBLIC_KEY,
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
	"corral.dev/services/memory"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "memory:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, getenv func(string) string, stderr io.Writer) (err error) {
	log := logger.New(stderr, getenv("CORRAL_LOG_LEVEL"), getenv("CORRAL_LOG_FORMAT"))
	cfg, err := memory.LoadConfig(getenv)
	if err != nil {
		return err
	}
	reg := metrics.NewRegistry()
	cfg.Metrics = reg
	nc, js, err := bus.Join(ctx, cfg.NATSURL, "memory", getenv, log)
	if err != nil {
		return err
	}
	// Returns once what the service published is flushed.
	defer func() { err = errors.Join(err, bus.Drain(nc, bus.DrainTimeout)) }()
	store, closeStore, err := memory.OpenStore(ctx, cfg, js)
	if err != nil {
		return err
	}
	defer closeStore()
	svc, err := memory.New(ctx, cfg, js, store, log)
	if err != nil {
		return err
	}
	return metrics.With(ctx, getenv("CORRAL_METRICS_LISTEN"), reg, metrics.Connected(nc), log, svc.Run)
}
