// Package natstest starts embedded NATS servers with JetStream for tests.
package natstest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
)

// Run starts an embedded NATS server with JetStream storing in a temporary
// directory on a free port, creates Corral's streams and buckets, and
// connects to it. The server is shut down, and waited for, before the
// directory is removed.
func Run(t testing.TB) (*server.Server, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	dir := t.TempDir() // registered first, so its cleanup runs last
	s, err := bus.StartServer(bus.ServerConfig{Host: "127.0.0.1", Port: -1, StoreDir: dir})
	if err != nil {
		t.Fatalf("start nats: %v", err)
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	nc, js := Connect(t, s.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := bus.Setup(ctx, js); err != nil {
		t.Fatalf("setup streams: %v", err)
	}
	return s, nc, js
}

// Connect opens a client connection to url, closed when the test ends.
func Connect(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatalf("connect nats: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return nc, js
}
