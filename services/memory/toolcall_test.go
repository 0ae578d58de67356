package memory_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/sessionlog"
	"corral.dev/services/memory"
)

// start runs a memory service on the embedded store of a fresh server.
func start(t *testing.T) (jetstream.JetStream, memory.Store) {
	t.Helper()
	return startWith(t, memory.Config{})
}

// startWith runs a memory service configured by cfg, with small limits
// unless cfg sets them, on a fresh server, until the test ends. It
// returns the server's JetStream and the store cfg names (see
// [memory.OpenStore]).
func startWith(t *testing.T, cfg memory.Config) (jetstream.JetStream, memory.Store) {
	t.Helper()
	_, _, js := natstest.Run(t)
	cfg.MaxFileBytes = cmp.Or(cfg.MaxFileBytes, memory.DefaultMaxFileBytes)
	cfg.MaxFiles = cmp.Or(cfg.MaxFiles, memory.DefaultMaxFiles)
	cfg.Concurrency = cmp.Or(cfg.Concurrency, 4)
	ctx := context.Background()
	store, release, err := memory.OpenStore(ctx, cfg, js)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release) // after the service stops
	svc, err := memory.New(ctx, cfg, js, store, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	natstest.Serve(t, svc.Run)
	return js, store
}

// call publishes a Write of content to p on the memory service's queue, on
// the subject of tenant's session, with a body naming bodyTenant, and
// returns the call and its stream sequence.
func call(t *testing.T, js jetstream.JetStream, tenant, bodyTenant string, session uuid.UUID, p, content string) (uuid.UUID, uint64) {
	t.Helper()
	input, _ := json.Marshal(map[string]string{"file_path": p, "content": content})
	c := event.ToolCall{
		Header: event.NewHeader(event.TypeToolCall, bodyTenant, session),
		Call:   uuid.Must(uuid.NewV7()), Turn: 1, User: "ada", Name: "Write", Input: input,
	}
	data, err := json.Marshal(&c)
	if err != nil {
		t.Fatal(err)
	}
	ack, err := js.Publish(context.Background(), bus.ToolSubject(bus.ServiceMemory, tenant, session), data)
	if err != nil {
		t.Fatal(err)
	}
	return c.Call, ack.Sequence
}

// results returns the results in a session's log as a reader judges them
// (their writer and service, not their order).
func results(t *testing.T, js jetstream.JetStream, tenant string, session uuid.UUID) []*event.ToolCompleted {
	t.Helper()
	ctx := context.Background()
	msgs, err := bus.ReadAll(ctx, js, bus.StreamEvents, sessionlog.SessionKind(tenant, session, event.TypeToolCompleted))
	if err != nil {
		t.Fatal(err)
	}
	l := sessionlog.New(js, sessionlog.Options{Reader: "test"})
	var out []*event.ToolCompleted
	for _, m := range msgs {
		en, err := l.Judge(ctx, m)
		if err != nil {
			t.Errorf("result on %s rejected: %v", m.Subject, err)
			continue
		}
		out = append(out, en.Event.(*event.ToolCompleted))
	}
	return out
}

// A call on the subject of one tenant's session whose body names another
// tenant is refused and dead-lettered: nothing is written to either
// tenant's memories and no result is recorded in either's log. The call of
// the subject's tenant itself runs, and its result is one readers accept.
func TestCallNamingAnotherTenantIsRefused(t *testing.T) {
	js, store := start(t)
	ctx := context.Background()
	session := uuid.Must(uuid.NewV7())
	_, seq := call(t, js, "acme", "initech", session, "/memories/notes.md", "planted")

	natstest.WaitFor(t, 10*time.Second, func() error {
		msgs, err := bus.ReadAll(ctx, js, bus.StreamDeadLetter, "deadletter.TOOLS.>")
		if err != nil {
			return err
		}
		for _, m := range msgs {
			var dl event.DeadLetter
			if err := json.Unmarshal(m.Data, &dl); err == nil && dl.StreamSeq == seq {
				return nil
			}
		}
		return fmt.Errorf("no dead letter of call %d", seq)
	})
	// The honest call comes after: once its result is in, the forged one
	// was long handled.
	id, _ := call(t, js, "acme", "acme", session, "/memories/own.md", "mine")
	natstest.WaitFor(t, 10*time.Second, func() error {
		if len(results(t, js, "acme", session)) == 0 {
			return errors.New("no result of the honest call")
		}
		return nil
	})
	for _, tenant := range []string{"acme", "initech"} {
		if f, err := store.Get(ctx, memory.Key{Tenant: tenant, Path: "/memories/notes.md"}); !errors.Is(err, memory.ErrNotFound) {
			t.Errorf("%s's /memories/notes.md = %q, %v: want none", tenant, f.Content, err)
		}
	}
	if rs := results(t, js, "initech", session); len(rs) != 0 {
		t.Errorf("results in initech's log: %+v", rs)
	}
	rs := results(t, js, "acme", session)
	if len(rs) != 1 || rs[0].Call != id || rs[0].Service != bus.ServiceMemory || rs[0].IsError {
		t.Errorf("acme's results = %+v, want the honest call's, by the memory service", rs)
	}
	if f, err := store.Get(ctx, memory.Key{Tenant: "acme", Path: "/memories/own.md"}); err != nil || f.Content != "mine" {
		t.Errorf("acme's /memories/own.md = %q, %v", f.Content, err)
	}
}
