package memory_test

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/pgtest"
	"corral.dev/services/memory"
)

// service is a memory service under test, reached as the harness and the
// CLI reach it: signed calls on its queue, and requests to its API.
type service struct {
	js jetstream.JetStream
	// key is the harness's key, which the service verifies calls with.
	key ed25519.PrivateKey
}

// forEachStore runs fn against a memory service on PostgreSQL and one on
// the embedded KV store.
func forEachStore(t *testing.T, fn func(t *testing.T, store string)) {
	for _, store := range []string{"postgres", "embedded"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			fn(t, store)
		})
	}
}

// startService runs a memory service with cfg (the limits left zero at
// their defaults) on store, "postgres" (a fresh schema) or "embedded".
func startService(t *testing.T, store string, cfg memory.Config) *service {
	t.Helper()
	pub, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _, js := natstest.Run(t)
	if store == "postgres" {
		cfg.DatabaseURL = pgtest.Schema(t)
	}
	cfg.MaxFileBytes = cmp.Or(cfg.MaxFileBytes, memory.DefaultMaxFileBytes)
	cfg.MaxFiles = cmp.Or(cfg.MaxFiles, memory.DefaultMaxFiles)
	cfg.Concurrency = cmp.Or(cfg.Concurrency, 4)
	cfg.CallKey = pub
	ctx, cancel := context.WithCancel(context.Background())
	st, closeStore, err := memory.OpenStore(ctx, cfg, js)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	svc, err := memory.New(ctx, cfg, js, st, slog.New(slog.DiscardHandler))
	if err != nil {
		cancel()
		closeStore()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		closeStore()
	})
	return &service{js: js, key: key}
}

// session is a harness session of a user: it remembers, as the harness
// does, the version of each file its calls last read or wrote, and its
// Writes and Edits expect that version.
type session struct {
	tenant, user string
	id           uuid.UUID
	seen         map[string]int64
}

func newSession(tenant, user string) *session {
	return &session{tenant: tenant, user: user, id: uuid.Must(uuid.NewV7()), seen: map[string]int64{}}
}

// send puts a call of sess on the memory service's queue, signed as the
// harness signs it, and returns it without waiting for its result.
func (s *service) send(t *testing.T, sess *session, name string, input any) *event.ToolCall {
	t.Helper()
	in, ok := input.(string)
	if !ok {
		b, err := json.Marshal(input)
		if err != nil {
			t.Fatal(err)
		}
		in = string(b)
	}
	c := &event.ToolCall{
		Header: event.NewHeader(event.TypeToolCall, sess.tenant, sess.id),
		Call:   uuid.Must(uuid.NewV7()), Turn: 1, User: sess.user, Name: name, Input: json.RawMessage(in),
	}
	if m, ok := input.(map[string]any); ok && (name == "Write" || name == "Edit") {
		p, _ := m["file_path"].(string)
		c.ExpectVersion = sess.seen[p]
	}
	c.Sign(s.key, bus.ServiceMemory)
	if err := bus.Publish(context.Background(), s.js, bus.ToolSubject(bus.ServiceMemory, sess.tenant, sess.id), c.Call.String(), c); err != nil {
		t.Fatal(err)
	}
	return c
}

// result waits for the result of call c of sess in the session's log, and
// notes the version it saw, as the harness does.
func (s *service) result(t *testing.T, sess *session, c *event.ToolCall) *event.ToolCompleted {
	t.Helper()
	var got *event.ToolCompleted
	natstest.WaitFor(t, 10*time.Second, func() error {
		for _, r := range results(t, s.js, sess.tenant, sess.id) {
			if r.Call == c.Call {
				got = r
				return nil
			}
		}
		return fmt.Errorf("no result of %s call %s", c.Name, c.Call)
	})
	if got.Service != bus.ServiceMemory || got.User != sess.user || got.Name != c.Name {
		t.Errorf("result of %s = %+v: want one by the memory service, for %s", c.Name, got, sess.user)
	}
	if got.Path != "" && !got.IsError {
		sess.seen[got.Path] = got.Version
	}
	return got
}

// call makes one call of sess and returns its result.
func (s *service) call(t *testing.T, sess *session, name string, input any) *event.ToolCompleted {
	t.Helper()
	return s.result(t, sess, s.send(t, sess, name, input))
}

// ok makes a call that must succeed and returns what it told the model.
func (s *service) ok(t *testing.T, sess *session, name string, input any) string {
	t.Helper()
	r := s.call(t, sess, name, input)
	if r.IsError {
		t.Fatalf("%s %v by %s: %s", name, input, sess.user, r.Output)
	}
	return r.Output
}

// refused makes a call that must fail, telling the model want.
func (s *service) refused(t *testing.T, sess *session, name string, input any, want string) {
	t.Helper()
	r := s.call(t, sess, name, input)
	if !r.IsError || !strings.Contains(r.Output, want) {
		t.Errorf("%s %.80v by %s = %q (error %v), want an error saying %q", name, input, sess.user, r.Output, r.IsError, want)
	}
}

func readArgs(p string) map[string]any { return map[string]any{"file_path": p} }

func writeArgs(p, content string) map[string]any {
	return map[string]any{"file_path": p, "content": content}
}

func editArgs(p, old, new string) map[string]any {
	return map[string]any{"file_path": p, "old_string": old, "new_string": new}
}

// api asks the memory API as user of tenant, as the CLI does.
func (s *service) api(t *testing.T, tenant, user, op string, req memory.APIRequest) (*memory.APIResponse, string) {
	t.Helper()
	if (op == memory.OpPut || op == memory.OpRemove || op == memory.OpRestore) && req.Op == uuid.Nil {
		req.Op = uuid.Must(uuid.NewV7())
	}
	return ask(t, s.js, memory.Subject(tenant, user, op), req)
}

// apiOK is api for a request that must succeed.
func (s *service) apiOK(t *testing.T, tenant, user, op string, req memory.APIRequest) *memory.APIResponse {
	t.Helper()
	resp, errDesc := s.api(t, tenant, user, op, req)
	if errDesc != "" {
		t.Fatalf("%s %s as %s of %s: %s", op, req.Path, user, tenant, errDesc)
	}
	return resp
}

// paths returns the paths of files.
func paths(files []memory.APIFile) string {
	var ps []string
	for _, f := range files {
		ps = append(ps, f.Path)
	}
	return strings.Join(ps, " ")
}

// Read, Write, Edit, Glob and Grep work on /memories as the sandbox's file
// tools do on /workspace: what one user's session writes, the tenant's
// other sessions read, list and search; /memories/private is each user's
// own; another tenant sees none of it. The API shows the same files.
func TestFileToolsOnMemories(t *testing.T) {
	forEachStore(t, func(t *testing.T, store string) {
		s := startService(t, store, memory.Config{})
		ada, bob, other := newSession("acme", "ada"), newSession("acme", "bob"), newSession("initech", "ada")

		if got := s.ok(t, ada, "Write", writeArgs("/memories/notes.md", "deploys go out with make ship\n")); got != "Wrote 30 bytes to /memories/notes.md (version 1)" {
			t.Errorf("Write = %q", got)
		}
		s.ok(t, ada, "Write", writeArgs("/memories/private/todo.md", "ada's secret plan\n"))

		if got := s.ok(t, bob, "Read", readArgs("/memories/notes.md")); got != "     1\tdeploys go out with make ship\n" {
			t.Errorf("bob's Read of notes.md = %q", got)
		}
		s.refused(t, bob, "Read", readArgs("/memories/private/todo.md"), "/memories/private/todo.md does not exist")
		if got := s.ok(t, newSession("acme", "ada"), "Read", readArgs("/memories/private/todo.md")); !strings.Contains(got, "ada's secret plan") {
			t.Errorf("ada's Read of her private todo.md in another session = %q", got)
		}
		s.refused(t, other, "Read", readArgs("/memories/notes.md"), "/memories/notes.md does not exist")
		s.refused(t, bob, "Read", readArgs("/memories"), "/memories is a directory: use Glob to list it")

		if got := s.ok(t, bob, "Glob", map[string]any{"pattern": "**", "path": "/memories"}); got != "/memories/notes.md\n" {
			t.Errorf("bob's Glob = %q, want notes.md alone", got)
		}
		if got := s.ok(t, ada, "Glob", map[string]any{"pattern": "**/*.md", "path": "/memories"}); got != "/memories/private/todo.md\n/memories/notes.md\n" {
			t.Errorf("ada's Glob = %q, want her todo.md, then notes.md (newest first)", got)
		}
		if got := s.ok(t, bob, "Grep", map[string]any{"pattern": "secret|ship", "path": "/memories"}); got != "/memories/notes.md:1:deploys go out with make ship\n" {
			t.Errorf("bob's Grep = %q, want the line of notes.md alone", got)
		}
		if got := s.ok(t, other, "Grep", map[string]any{"pattern": "ship", "path": "/memories"}); got != "No matches found" {
			t.Errorf("another tenant's Grep = %q", got)
		}

		// Bob read notes.md: his Edit expects the version he read.
		edited := s.call(t, bob, "Edit", editArgs("/memories/notes.md", "make ship", "make deploy"))
		if want := fmt.Sprintf("Edited /memories/notes.md (version %d)", edited.Version); edited.IsError || edited.Output != want || edited.Version <= 1 {
			t.Errorf("bob's Edit = %q, want %q, of a new version", edited.Output, want)
		}
		if got := s.ok(t, ada, "Read", readArgs("/memories/notes.md")); got != "     1\tdeploys go out with make deploy\n" {
			t.Errorf("ada's Read after bob's Edit = %q", got)
		}

		// The CLI sees the same files, each user their own private ones.
		for _, tc := range []struct{ tenant, user, want string }{
			{"acme", "ada", "/memories/notes.md /memories/private/todo.md"},
			{"acme", "bob", "/memories/notes.md"},
			{"initech", "ada", ""},
		} {
			if ls := s.apiOK(t, tc.tenant, tc.user, memory.OpList, memory.APIRequest{Path: "/memories"}); paths(ls.Files) != tc.want {
				t.Errorf("ls /memories as %s of %s = %q, want %q", tc.user, tc.tenant, paths(ls.Files), tc.want)
			}
		}
		cat := s.apiOK(t, "acme", "carol", memory.OpGet, memory.APIRequest{Path: "/memories/notes.md"})
		if f := cat.Files[0]; f.Content != "deploys go out with make deploy\n" || f.Version != edited.Version || f.UpdatedBy != "bob" {
			t.Errorf("cat notes.md = %+v, want bob's version %d", f, edited.Version)
		}
		for _, tc := range []struct{ tenant, user, op, path string }{
			{"acme", "bob", memory.OpGet, "/memories/private/todo.md"},
			{"initech", "ada", memory.OpGet, "/memories/notes.md"},
			{"initech", "ada", memory.OpRemove, "/memories/notes.md"},
			{"acme", "bob", memory.OpRemove, "/memories/private/todo.md"},
		} {
			if resp, errDesc := s.api(t, tc.tenant, tc.user, tc.op, memory.APIRequest{Path: tc.path}); !strings.Contains(errDesc, memory.ErrNotFound.Error()) {
				t.Errorf("%s %s as %s of %s = %+v, %q; want not found", tc.op, tc.path, tc.user, tc.tenant, resp, errDesc)
			}
		}
		if rm := s.apiOK(t, "acme", "bob", memory.OpRemove, memory.APIRequest{Path: "/memories/notes.md"}); rm.Removed != 1 {
			t.Errorf("rm notes.md removed %d", rm.Removed)
		}
		s.refused(t, newSession("acme", "bob"), "Read", readArgs("/memories/notes.md"), "/memories/notes.md does not exist")
		if got := s.ok(t, newSession("acme", "ada"), "Read", readArgs("/memories/private/todo.md")); !strings.Contains(got, "ada's secret plan") {
			t.Errorf("ada's private todo.md after bob's rm = %q", got)
		}
	})
}
