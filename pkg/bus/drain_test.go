package bus_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/natstest"
)

// Drain returns once the connection has drained: a message its
// subscription received is handled by then, and the connection closed.
func TestDrainWaits(t *testing.T) {
	srv, _, _ := natstest.Run(t)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	var handled atomic.Bool
	received := make(chan struct{})
	if _, err := nc.Subscribe("work", func(*nats.Msg) {
		close(received)
		time.Sleep(300 * time.Millisecond) // a handler still busy when the drain starts
		handled.Store(true)
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("work", nil); err != nil {
		t.Fatal(err)
	}
	<-received
	if err := bus.Drain(nc, 5*time.Second); err != nil {
		t.Fatalf("drain: %v", err)
	}
	if !handled.Load() {
		t.Error("drain returned before the message received was handled")
	}
	if !nc.IsClosed() {
		t.Error("drain returned before the connection closed")
	}
	// Drained twice, as a deferred drain after an early one is.
	if err := bus.Drain(nc, time.Second); err != nil {
		t.Errorf("second drain: %v", err)
	}
}

// A drain that does not end in time is cut short, and says so.
func TestDrainTimeout(t *testing.T) {
	srv, _, _ := natstest.Run(t)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	received := make(chan struct{})
	if _, err := nc.Subscribe("work", func(*nats.Msg) { close(received); <-release }); err != nil {
		t.Fatal(err)
	}
	defer close(release)
	if err := nc.Publish("work", nil); err != nil {
		t.Fatal(err)
	}
	<-received
	if err := bus.Drain(nc, 100*time.Millisecond); err == nil {
		t.Error("drain of a connection whose handler never returns: no error")
	}
	if !nc.IsClosed() {
		t.Error("drain cut short left the connection open")
	}
}
