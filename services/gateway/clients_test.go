package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"corral.dev/pkg/natstest"
)

// TestPaddedKeysShareASignIn checks that a key sent with spaces around it
// is the same client as the key itself: it waits for the key's sign-in
// under way rather than starting one of its own, so that padding one key
// in many ways cannot take every connection the gateway may hold.
func TestPaddedKeysShareASignIn(t *testing.T) {
	t.Parallel()
	// A server that takes connections and never answers: a sign-in
	// waits there until its time-out.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})

	cs := newClients("nats://"+ln.Addr().String(), []nats.Option{nats.Timeout(2 * time.Second)}, slog.New(slog.DiscardHandler), time.Minute, 1)
	key := "c-0123456789abcdef0123456789abcdef:secret"
	first := make(chan error, 1)
	go func() {
		_, _, err := cs.acquire(context.Background(), key, "192.0.2.1")
		first <- err
	}()
	natstest.WaitFor(t, 5*time.Second, func() error {
		cs.mu.Lock()
		defer cs.mu.Unlock()
		if len(cs.conns) != 1 {
			return fmt.Errorf("%d sign-ins under way, want the key's", len(cs.conns))
		}
		return nil
	})
	for _, padded := range []string{" " + key, "\u00a0" + key + "\u2003"} {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		_, _, err := cs.acquire(ctx, padded, "192.0.2.1")
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("the key padded as %q: %v, want it to wait for the key's own sign-in", padded, err)
		}
	}
	if err := <-first; err == nil {
		t.Error("a sign-in to a server that never answers succeeded")
	}
}
