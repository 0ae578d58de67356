package process_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/nats-io/nats.go"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/metrics"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/process"
)

// Close releases what the services took last first: a store released
// after the connections made after it, and before the one made before it.
func TestCloseReleasesLastFirst(t *testing.T) {
	t.Parallel()
	srv, _, _ := natstest.Run(t)
	env := process.NewEnv(func(string) string { return "" }, slog.New(slog.DiscardHandler), metrics.NewRegistry(), func(name string) (*nats.Conn, error) {
		return bus.Connect(srv.ClientURL(), name, slog.New(slog.DiscardHandler))
	})
	first, _, err := env.Connect("first")
	if err != nil {
		t.Fatal(err)
	}
	var seen []nats.Status
	var last *nats.Conn
	env.Defer(func() { seen = append(seen, first.Status(), last.Status()) })
	if last, _, err = env.Connect("last"); err != nil {
		t.Fatal(err)
	}
	if err := env.Healthy(); err != nil {
		t.Errorf("healthy: %v", err)
	}
	if err := env.Close(); err != nil {
		t.Fatal(err)
	}
	if want := []nats.Status{nats.CONNECTED, nats.CLOSED}; len(seen) != 2 || seen[0] != want[0] || seen[1] != want[1] {
		t.Errorf("at the release, the first and last connections were %v, want %v", seen, want)
	}
	if first.Status() != nats.CLOSED {
		t.Errorf("after Close, the first connection is %s, want it drained", first.Status())
	}
}

// runner is a service that serves until its context is done.
type runner struct{ ran chan struct{} }

func (r runner) Run(ctx context.Context) error {
	close(r.ran)
	<-ctx.Done()
	return nil
}

// Run connects the service to CORRAL_NATS_URL, sets up the streams and
// buckets, runs it until ctx is done, and drains its connection before it
// returns; a service that cannot start is reported, its connection
// drained too.
func TestRun(t *testing.T) {
	t.Parallel()
	srv, _, _ := natstest.Run(t)
	getenv := func(k string) string {
		return map[string]string{"CORRAL_NATS_URL": srv.ClientURL()}[k]
	}
	load := func(func(string) string) (string, error) { return "config", nil }
	var conn *nats.Conn
	r := runner{ran: make(chan struct{})}
	start := func(ctx context.Context, cfg string, env *process.Env) (runner, error) {
		js, err := env.Join(ctx, "svc")
		if err != nil {
			return runner{}, err
		}
		conn = js.Conn()
		if _, err := js.Stream(ctx, bus.StreamEvents); err != nil {
			t.Errorf("after Join: %v, want the streams set up", err)
		}
		return r, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- process.Run(ctx, getenv, io.Discard, load, start) }()
	<-r.ran
	if conn.Status() != nats.CONNECTED {
		t.Errorf("while running, the connection is %s", conn.Status())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if conn.Status() != nats.CLOSED {
		t.Errorf("after Run, the connection is %s, want it drained", conn.Status())
	}

	refused := errors.New("refused")
	err := process.Run(context.Background(), getenv, io.Discard, load, func(ctx context.Context, _ string, env *process.Env) (runner, error) {
		js, err := env.Join(ctx, "svc")
		if err != nil {
			return runner{}, err
		}
		conn = js.Conn()
		return runner{}, refused
	})
	if !errors.Is(err, refused) || conn.Status() != nats.CLOSED {
		t.Errorf("a service that cannot start: %v, its connection %s; want %v, and the connection drained", err, conn.Status(), refused)
	}
}
