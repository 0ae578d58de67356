package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/sessionindex"
	"corral.dev/services/gateway"
)

// TestSessionsListIsPrintable checks that `corral sessions` shows what a
// tenant's requests put in the index (a prompt's first line as the title,
// the user, the model) without what a terminal would act on: whoever
// lists a tenant's sessions reads what any of its users wrote.
func TestSessionsListIsPrintable(t *testing.T) {
	t.Parallel()
	b := newClientBus(t)
	ctx := context.Background()
	if err := gateway.Setup(ctx, b.js); err != nil {
		t.Fatal(err)
	}
	kv, err := b.js.KeyValue(ctx, bus.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	id := uuid.Must(uuid.NewV7())
	now := time.Now().UTC()
	e := sessionindex.Entry{Tenant: "acme", Session: id, User: "ada\x1b[8m", Status: sessionindex.Running, Model: "openai:m\u009b2J",
		Started: now, LastEvent: now, Title: "\x1b]52;c;cm0gLXJmIH4=\x07 tidy \x1b[2Jup", Requests: 1, Seq: 1}
	data, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, sessionindex.Key("acme", id), data); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := b.corral(t, "sessions", "--tenant", "acme")
	if code != 0 {
		t.Fatalf("corral sessions: exit %d: %s", code, stderr)
	}
	if strings.ContainsAny(stdout, "\x1b\x07\u009b") {
		t.Errorf("corral sessions shows what a terminal acts on:\n%q", stdout)
	}
	if !strings.Contains(stdout, "tidy") || !strings.Contains(stdout, id.String()) {
		t.Errorf("corral sessions:\n%s\nwant the session and its title", stdout)
	}
}
