package harness

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/natstest"
)

// A request that does not validate starts nothing: its session records
// why it was refused, the request is dead-lettered, and the harness goes
// on serving.
func TestMalformedRequestsAreRefusedAndRecorded(t *testing.T) {
	js, fake := start(t, nil)
	ctx := context.Background()
	head := func(session string) string {
		return `"type":"corral.session.v1.request","id":"` + uuid.NewString() + `","time":"2026-11-22T10:00:00Z","tenant":"acme","session":"` + session + `","user":"ada"`
	}
	tests := []struct {
		name string
		data func(session string) string
		want string
	}{
		{"not JSON", func(string) string { return `{"type": "corral.session.v1.request",` }, "not JSON"},
		{"missing prompt", func(s string) string { return "{" + head(s) + "}" }, "/prompt: missing"},
		{"wrong type", func(s string) string { return "{" + head(s) + `,"model":42,"prompt":"hi"}` }, "/model: got number, want string"},
		{"unknown field", func(s string) string { return "{" + head(s) + `,"prompt":"hi","temperature":0.2}` }, "/temperature: unknown field"},
		{"empty prompt", func(s string) string { return "{" + head(s) + `,"prompt":""}` }, "/prompt: minLength"},
		{"session mismatch", func(string) string { return "{" + head(uuid.NewString()) + `,"prompt":"hi"}` }, "does not match"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			session := uuid.Must(uuid.NewV7())
			if _, err := js.Publish(ctx, bus.RequestSubject("acme", session, "ada"), []byte(tc.data(session.String()))); err != nil {
				t.Fatal(err)
			}
			f := failure(t, ended(t, js, "acme", session, 1))
			if f.Code != event.CodeInvalidRequest || !strings.HasPrefix(f.Reason, "invalid request: ") || !strings.Contains(f.Reason, tc.want) {
				t.Errorf("failure = %s %q, want %s mentioning %q", f.Code, f.Reason, event.CodeInvalidRequest, tc.want)
			}
		})
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		msgs, err := bus.ReadAll(ctx, js, bus.StreamDeadLetter, "deadletter.>")
		if err != nil {
			return err
		}
		if len(msgs) != len(tests) {
			return fmt.Errorf("%d dead letters, want %d", len(msgs), len(tests))
		}
		return nil
	})
	if n := len(fake.Requests()); n != 0 {
		t.Errorf("the model was asked %d times", n)
	}
	session := ask(t, js, "acme", "ada", uuid.Must(uuid.NewV7()), "", "hello")
	if done := ofType[*event.SessionCompleted](ended(t, js, "acme", session, 1)); len(done) != 1 {
		t.Errorf("the next session did not complete")
	}
}
