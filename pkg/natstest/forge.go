package natstest

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
)

// Forge publishes v, encoded as JSON, on subject as it is, as anyone
// allowed to publish there could, whatever the subject says it should
// hold, and returns its stream sequence.
func Forge(t testing.TB, js jetstream.JetStream, subject string, v any) uint64 {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	ack, err := js.Publish(context.Background(), subject, data)
	if err != nil {
		t.Fatalf("publish %s: %v", subject, err)
	}
	return ack.Sequence
}

// DeadLetters returns the dead letters kept on the DEADLETTER subjects
// matching filter ("deadletter.>" for all, "deadletter.EVENTS.>" for the
// session logs'), decoded, in the order they were kept.
func DeadLetters(t testing.TB, js jetstream.JetStream, filter string) []event.DeadLetter {
	t.Helper()
	msgs, err := bus.ReadAll(context.Background(), js, bus.StreamDeadLetter, filter)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]event.DeadLetter, 0, len(msgs))
	for _, m := range msgs {
		var dl event.DeadLetter
		if err := json.Unmarshal(m.Data, &dl); err != nil {
			t.Fatalf("dead letter %d: %v", m.StreamSeq, err)
		}
		out = append(out, dl)
	}
	return out
}
