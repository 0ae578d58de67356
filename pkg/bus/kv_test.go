package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/natstest"
)

// A compare-and-set that loses is a conflict on one server and on a
// cluster alike, where replicated streams report it with another code.
func TestSwapConflicts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		replicas int
	}{{"one server", 1}, {"three replicas", 3}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var js jetstream.JetStream
			if tc.replicas == 1 {
				_, _, js = natstest.Run(t)
			} else {
				_, js = natstest.Connect(t, natstest.RunCluster(t, tc.replicas).URL())
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "swap", Replicas: tc.replicas})
			if err != nil {
				t.Fatal(err)
			}
			first, err := bus.Swap(ctx, kv, "k", []byte("1"), 0)
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			if _, err := bus.Swap(ctx, kv, "k", []byte("2"), 0); !bus.Conflict(err) {
				t.Errorf("create of a key that exists: %v, want a conflict", err)
			}
			second, err := bus.Swap(ctx, kv, "k", []byte("3"), first)
			if err != nil || second <= first {
				t.Fatalf("update at the key's revision: revision %d, %v", second, err)
			}
			if _, err := bus.Swap(ctx, kv, "k", []byte("4"), first); !bus.Conflict(err) {
				t.Errorf("update at a revision since replaced: %v, want a conflict", err)
			}
			if e, err := kv.Get(ctx, "k"); err != nil || string(e.Value()) != "3" {
				t.Errorf("the key holds %q (%v), want the winner's 3", e.Value(), err)
			}
			if _, err := kv.Get(ctx, "missing"); bus.Conflict(err) || bus.Conflict(nil) {
				t.Errorf("a missing key or no error is a conflict")
			}

			// Appending behind a session's log (natstest.Run sets the
			// streams up; a cluster starts with none).
			if tc.replicas > 1 {
				if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: bus.StreamEvents, Subjects: []string{"events.>"}, Replicas: tc.replicas}); err != nil {
					t.Fatal(err)
				}
			}
			// A publish on the condition that the session has no event
			// yet, as package sessionlog appends: the second loses.
			s := uuid.Must(uuid.NewV7())
			subject := "events.acme." + s.String() + ".session.failed.harness"
			noEvent := jetstream.WithExpectLastSequenceForSubject(0, bus.SessionEvents("acme", s))
			if _, err := js.Publish(ctx, subject, []byte(`{}`), noEvent, jetstream.WithMsgID("one")); err != nil {
				t.Fatal(err)
			}
			if _, err := js.Publish(ctx, subject, []byte(`{}`), noEvent, jetstream.WithMsgID("two")); !bus.Conflict(err) {
				t.Errorf("append behind the log: %v, want a conflict", err)
			}
		})
	}
}
