package memory_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/pgtest"
	"corral.dev/pkg/preview"
	"corral.dev/services/memory"
)

// startOnPostgres runs a memory service on a fresh PostgreSQL schema that
// verifies calls with the harness's public key pub, and returns its
// server's connection and its store.
func startOnPostgres(t *testing.T, pub ed25519.PublicKey) (*nats.Conn, memory.Store) {
	t.Helper()
	js, store := startWith(t, memory.Config{DatabaseURL: pgtest.Schema(t), CallKey: pub})
	return js.Conn(), store
}

// put writes content to p for user (of acme) as the next version, and
// returns it.
func put(t *testing.T, store memory.Store, user, p, content string, expect int64) int64 {
	t.Helper()
	k := memory.Key{Tenant: "acme", Path: p}
	if strings.HasPrefix(p, "/memories/private/") {
		k.Owner = user
	}
	f, err := store.Put(context.Background(), memory.Write{Key: k, Content: content, Expect: expect, By: user, Op: uuid.Must(uuid.NewV7())})
	if err != nil {
		t.Fatal(err)
	}
	return f.Version
}

// editCall is an Edit of p by user in a session of acme, which last read
// version seen of it.
func editCall(user, p, oldString, newString string, seen int64) *event.ToolCall {
	input, _ := json.Marshal(map[string]string{"file_path": p, "old_string": oldString, "new_string": newString})
	return &event.ToolCall{Header: event.NewHeader(event.TypeToolCall, "acme", uuid.Must(uuid.NewV7())), Call: uuid.Must(uuid.NewV7()),
		Turn: 2, User: user, Name: "Edit", Input: input, ExpectVersion: seen}
}

// The memory service answers the harness's request for a preview of an
// Edit with the diff of the file as stored, with its context, for the
// call's user; with a line saying the Edit will be refused when the file
// changed since the session read it; and shows nothing to a request the
// harness did not sign for a preview by it.
func TestPreviewOfAMemoryEdit(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	_, otherKey, _ := ed25519.GenerateKey(nil)
	nc, store := startOnPostgres(t, pub)
	notes := "# Deploys\nrun make deploy\ncheck the dashboard\nwrite it down\nthen rest\n"
	v := put(t, store, "ada", "/memories/notes.md", notes, 0)
	v = put(t, store, "ada", "/memories/notes.md", notes+"the end\n", v)
	put(t, store, "ada", "/memories/private/plan.md", "ada's plan: make deploy\n", 0)
	ask := func(c *event.ToolCall, sign func(*event.ToolCall)) (string, error) {
		sign(c)
		return preview.Ask(context.Background(), nc, bus.ServiceMemory, c)
	}
	signed := func(c *event.ToolCall) { c.SignPreview(key, bus.ServiceMemory) }

	var got string
	natstest.WaitFor(t, 10*time.Second, func() error {
		var err error
		got, err = ask(editCall("ada", "/memories/notes.md", "make deploy", "make ship", v), signed)
		return err
	})
	if want := "--- a/memories/notes.md\n+++ b/memories/notes.md\n@@ -1,5 +1,5 @@\n # Deploys\n-run make deploy\n+run make ship\n check the dashboard\n write it down\n then rest\n"; got != want {
		t.Errorf("preview = %q\nwant %q", got, want)
	}

	got, err := ask(editCall("ada", "/memories/notes.md", "make deploy", "make ship", v-1), signed)
	if want := "No diff: /memories/notes.md changed since this session read it (it read version 1, and it is at version 2 now): the Edit will be refused as it stands."; err != nil || got != want {
		t.Errorf("preview of an Edit of a changed file = %q, %v\nwant %q", got, err, want)
	}

	// /memories/private is the call's user's own.
	got, err = ask(editCall("ada", "/memories/private/plan.md", "make deploy", "make ship", 1), signed)
	if err != nil || !strings.Contains(got, "-ada's plan: make deploy\n+ada's plan: make ship\n") {
		t.Errorf("ada's preview of her private file = %q, %v", got, err)
	}
	got, err = ask(editCall("bob", "/memories/private/plan.md", "make deploy", "make ship", 1), signed)
	if err != nil || got != "No diff: /memories/private/plan.md does not exist: the Edit will be refused." {
		t.Errorf("bob's preview of his private file = %q, %v; want it not to exist", got, err)
	}

	// Only the harness's request for a preview by the memory service is
	// answered.
	for name, sign := range map[string]func(*event.ToolCall){
		"unsigned":                  func(c *event.ToolCall) { c.Signature = nil },
		"signed by another key":     func(c *event.ToolCall) { c.SignPreview(otherKey, bus.ServiceMemory) },
		"signed to run":             func(c *event.ToolCall) { c.Sign(key, bus.ServiceMemory) },
		"signed for the sandbox":    func(c *event.ToolCall) { c.SignPreview(key, bus.ServiceSandbox) },
		"signed, then altered":      func(c *event.ToolCall) { signed(c); c.User = "mallory" },
		"signed, then re-versioned": func(c *event.ToolCall) { signed(c); c.ExpectVersion = 7 },
	} {
		got, err := ask(editCall("ada", "/memories/private/plan.md", "make deploy", "make ship", 1), sign)
		if err == nil || strings.Contains(got, "plan") {
			t.Errorf("%s: preview = %q, %v; want a refusal, and no content", name, got, err)
		}
	}
}
