package main

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/credential"
	"corral.dev/pkg/metrics"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/process"
	"corral.dev/services/approval"
	"corral.dev/services/auth"
	"corral.dev/services/harness"
	"corral.dev/services/memory"
	sandboxmanager "corral.dev/services/sandbox-manager"
)

// components are the services tests run in this process, by their NATS
// users, each configured from its Env's environment and started as its
// binary starts it.
var components = map[string]process.Component{
	credential.UserHarness:  process.Of(harness.LoadConfig, harness.Start),
	credential.UserSandbox:  process.Of(sandboxmanager.LoadConfig, sandboxmanager.Start),
	credential.UserMemory:   process.Of(memory.LoadConfig, memory.Start),
	credential.UserAuth:     process.Of(auth.LoadConfig, auth.Start),
	credential.UserApproval: process.Of(approval.LoadConfig, approval.Start),
}

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
