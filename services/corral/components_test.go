package main

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/metrics"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/process"
)

// envOn returns an Env, configured by getenv, in which every service
// uses js's connection, with a metrics registry of its own.
func envOn(js jetstream.JetStream, getenv func(string) string) *process.Env {
	return process.NewEnv(getenv, slog.New(slog.DiscardHandler), metrics.NewRegistry(), func(string) (*nats.Conn, error) {
		return js.Conn(), nil
	})
}

// runComponents starts the services of users in env, in order, and runs
// them until the test ends: each stops before the connections made before
// it close, later ones first, and env closes last. A service that cannot
// start, or fails, fails the test.
func runComponents(t testing.TB, env *process.Env, users ...string) {
	t.Helper()
	t.Cleanup(func() {
		if err := env.Close(); err != nil {
			t.Error(err)
		}
	})
	for _, user := range users {
		r, err := components[user](context.Background(), env)
		if err != nil {
			t.Fatalf("%s: %v", user, err)
		}
		natstest.Serve(t, func(ctx context.Context) error {
			if err := r.Run(ctx); err != nil {
				return fmt.Errorf("%s: %w", user, err)
			}
			return nil
		})
	}
}
