package sessionlog_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/sessionlog"
)

// errorsIsRejected reports whether err matches both names of the
// rejection sentinel.
func errorsIsRejected(err error) bool {
	return errors.Is(err, sessionlog.ErrRejected) && errors.Is(err, bus.ErrRejected)
}

// newLog returns a Log as the services make it, writing as w.
func newLog(js jetstream.JetStream, w sessionlog.Writer) *sessionlog.Log {
	return sessionlog.New(js, sessionlog.Options{As: w, Reader: "test", DeadLetters: true})
}

// deadLetter is a message of the DEADLETTER stream, decoded.
type deadLetter struct {
	Msg    bus.Msg // where and under which ID it was dead-lettered
	Letter event.DeadLetter
}

func deadLetters(t *testing.T, js jetstream.JetStream) []deadLetter {
	t.Helper()
	msgs, err := bus.ReadAll(context.Background(), js, bus.StreamDeadLetter, "deadletter.>")
	if err != nil {
		t.Fatal(err)
	}
	out := make([]deadLetter, 0, len(msgs))
	for _, m := range msgs {
		var dl event.DeadLetter
		if err := json.Unmarshal(m.Data, &dl); err != nil {
			t.Fatal(err)
		}
		out = append(out, deadLetter{m, dl})
	}
	return out
}

// types returns the types of entries, in order.
func types(entries []sessionlog.Entry) []string {
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		out = append(out, e.Type)
	}
	return out
}

func failed(tenant string, s uuid.UUID, reason string) *event.SessionFailed {
	return &event.SessionFailed{Header: event.NewHeader(event.TypeSessionFailed, tenant, s), Code: "c", Reason: reason}
}

// reasons returns the Reason of each failed event of entries, in order.
func reasons(entries []sessionlog.Entry) []string {
	var out []string
	for _, e := range entries {
		if f, ok := e.Event.(*event.SessionFailed); ok {
			out = append(out, f.Reason)
		}
	}
	return out
}
