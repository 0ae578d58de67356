package bus_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
)

// A publish (or a direct get) the server's permissions refuse fails with ErrRefused as soon
// as the server says so, not when its time-out passes; other publishes of
// the connection go on.
func TestRefusedPublishFailsAtOnce(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(conf, []byte(`authorization { users = [
  { user: admin, password: a }
  { user: limited, password: l, permissions: { publish: { allow: ["$JS.API.STREAM.INFO.>", "$JS.API.DIRECT.GET.REQ.requests.acme.>", "requests.acme.>"] }, subscribe: { allow: ["_INBOX.>"] } } }
] }`), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := bus.StartServer(bus.ServerConfig{Host: "127.0.0.1", Port: -1, StoreDir: dir, ConfigFile: conf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	ctx := context.Background()
	admin, err := bus.Connect(srv.ClientURL(), "admin", slog.New(slog.DiscardHandler), bus.SignIn("admin", "a"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ajs, _ := jetstream.New(admin)
	if _, err := ajs.CreateStream(ctx, jetstream.StreamConfig{Name: "REQ", Subjects: []string{"requests.>"}, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}

	nc, err := bus.Connect(srv.ClientURL(), "limited", slog.New(slog.DiscardHandler), bus.SignIn("limited", "l"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	// Long enough that only the refusal can end it.
	ctx, cancel := context.WithTimeout(ctx, 10*bus.RequestTimeout)
	defer cancel()
	if err := bus.Publish(ctx, js, "requests.initech.x", "1", map[string]string{"a": "b"}); !errors.Is(err, bus.ErrRefused) {
		t.Errorf("refused publish: %v, want %v", err, bus.ErrRefused)
	}
	if err := bus.Publish(ctx, js, "requests.acme.x", "2", map[string]string{"a": "b"}); err != nil {
		t.Errorf("permitted publish: %v", err)
	}
	// A read refused the same way.
	if _, err := bus.LastBySubject(ctx, js, "REQ", "requests.initech.x"); !errors.Is(err, bus.ErrRefused) {
		t.Errorf("refused read: %v, want %v", err, bus.ErrRefused)
	}
	if _, err := bus.LastBySubject(ctx, js, "REQ", "requests.acme.x"); err != nil {
		t.Errorf("permitted read: %v", err)
	}
	// And a consumer, for a read or for work, the server will not create.
	if _, err := bus.ReadByConsumer(ctx, js, "REQ", "requests.acme.x", 0); !errors.Is(err, bus.ErrRefused) {
		t.Errorf("read through a refused consumer: %v, want %v", err, bus.ErrRefused)
	}
	err = bus.Consume(ctx, js, bus.Consumer{Stream: "REQ", Config: jetstream.ConsumerConfig{Durable: "work"},
		Handler: func(context.Context, bus.Msg) error { return nil }})
	if !errors.Is(err, bus.ErrRefused) {
		t.Errorf("consume from a refused consumer: %v, want %v", err, bus.ErrRefused)
	}
	if ctx.Err() != nil {
		t.Errorf("the refusals took %v", 10*bus.RequestTimeout)
	}
}
