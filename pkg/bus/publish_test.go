package bus_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/natstest"
)

// PublishFirst stores a message once while its subject holds one, and
// again once that one is taken; what others publish on other subjects,
// whatever their message IDs, changes nothing.
func TestPublishFirst(t *testing.T) {
	t.Parallel()
	_, _, js := natstest.Run(t)
	ctx := context.Background()
	s := uuid.Must(uuid.NewV7())
	subj := bus.RequestSubject("acme", s, "ada")
	other := bus.RequestSubject("globex", uuid.Must(uuid.NewV7()), "eve")
	if _, err := js.Publish(ctx, other, []byte(`{}`), jetstream.WithMsgID(subj)); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false, false} {
		stored, err := bus.PublishFirst(ctx, js, subj, map[string]int{"try": i})
		if err != nil || stored != want {
			t.Fatalf("publish %d: stored %v, %v; want %v", i, stored, err, want)
		}
	}
	stream, err := js.Stream(ctx, bus.StreamRequests)
	if err != nil {
		t.Fatal(err)
	}
	m, err := stream.GetLastMsgForSubject(ctx, subj)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Data) != `{"try":0}` {
		t.Errorf("stored %s, want the first", m.Data)
	}
	// Taken off the work queue: the subject is free again.
	if err := stream.DeleteMsg(ctx, m.Sequence); err != nil {
		t.Fatal(err)
	}
	if stored, err := bus.PublishFirst(ctx, js, subj, map[string]int{"try": 3}); err != nil || !stored {
		t.Errorf("publish after the first was taken: stored %v, %v; want stored", stored, err)
	}
}
