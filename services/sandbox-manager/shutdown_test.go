package sandboxmanager

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/natstest"
)

// A node that stops while a call runs keeps its lease until the call's
// result is recorded: given up before, it would let another node take
// the session over while the call still runs here.
func TestNodeLeaseOutlivesCallsInFlight(t *testing.T) {
	_, _, js := natstest.Run(t)
	svc, stop := startNode(t, js, nil)
	ctx := context.Background()
	nodes, err := js.KeyValue(ctx, bus.BucketNodes)
	if err != nil {
		t.Fatal(err)
	}
	w, err := nodes.Watch(ctx, svc.cfg.Node, jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	calls, err := js.KeyValue(ctx, bus.BucketCalls)
	if err != nil {
		t.Fatal(err)
	}

	session, call := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	dispatch(t, js, session, call, "Bash", `{"command":"sleep 1; echo done"}`, call.String())
	// Running once its marker is written, just before the command starts.
	natstest.WaitFor(t, 15*time.Second, func() error {
		_, err := calls.Get(ctx, bus.CallKey("acme", session, call))
		return err
	})
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()

	// Renewals come and go; the lease is given up with a delete.
	deadline := time.After(15 * time.Second)
	for gone := false; !gone; {
		select {
		case e := <-w.Updates():
			gone = e != nil && e.Operation() != jetstream.KeyValuePut
		case <-deadline:
			t.Fatal("the node's lease was not given up within 15s of its stop")
		}
	}
	if got := results(t, js, "acme", session); len(got) != 1 {
		t.Fatalf("the node's lease was given up with %d results of the call in flight recorded, want 1", len(got))
	}
	<-stopped
}
