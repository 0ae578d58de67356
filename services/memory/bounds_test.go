package memory

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/event"
	"corral.dev/pkg/natstest"
)

// bounded runs a memory service's calls directly, on the embedded store,
// with files at the paths given (each holding "x").
func bounded(t *testing.T, cfg Config, paths ...string) *Service {
	t.Helper()
	_, _, js := natstest.Run(t)
	store, err := NewKVStore(t.Context(), js)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxFileBytes, cfg.MaxFiles, cfg.Concurrency = DefaultMaxFileBytes, DefaultMaxFiles, 1
	s, err := New(t.Context(), cfg, js, store, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		k := Key{Tenant: "acme", Path: p}
		if _, err := store.Put(t.Context(), Write{Key: k, Content: "x\n", By: "ada", Op: uuid.New(), MaxFiles: DefaultMaxFiles}); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// runCall runs one call and fails the test if it has not returned within
// ten seconds.
func runCall(t *testing.T, s *Service, name string, input map[string]any) result {
	t.Helper()
	in, _ := json.Marshal(input)
	c := &event.ToolCall{Header: event.NewHeader(event.TypeToolCall, "acme", uuid.New()), Call: uuid.New(), User: "ada", Name: name, Input: in}
	if p, ok := input["file_path"].(string); ok && name == "Edit" {
		// As if the session had read it.
		f, err := s.store.Get(t.Context(), Key{Tenant: "acme", Path: p})
		if err != nil {
			t.Fatal(err)
		}
		c.ExpectVersion = f.Version
	}
	done := make(chan result, 1)
	go func() {
		r, err := s.run(context.WithoutCancel(t.Context()), c)
		if err != nil {
			r = failf("Go error: %v", err)
		}
		done <- r
	}()
	select {
	case r := <-done:
		return r
	case <-time.After(10 * time.Second):
		t.Fatalf("%s %v still running after 10s", name, input)
		return result{}
	}
}

// deep is a memory path 300 names deep: trying each way the six ** of
// bomb could split it is some 10^12 steps.
var deep = "/memories/" + strings.Repeat("a/", 300) + "b.md"

const bomb = "**/a/**/a/**/a/**/a/**/a/**/zzz"

func TestMemoryGlobBombIsQuick(t *testing.T) {
	t.Parallel()
	s := bounded(t, Config{}, deep, "/memories/a/a/a/a/a/zzz")
	if r := runCall(t, s, "Glob", map[string]any{"pattern": bomb, "path": "/memories"}); r.text != "/memories/a/a/a/a/a/zzz\n" {
		t.Errorf("Glob(%s) = %q", bomb, r.text)
	}
	r := runCall(t, s, "Grep", map[string]any{"pattern": "x", "path": "/memories", "glob": strings.Replace(bomb, "zzz", "b.md", 1)})
	if !strings.HasPrefix(r.text, deep+":1:x") {
		t.Errorf("Grep with a ** filter = %q", r.text)
	}
}

func TestMemoryFileToolBounds(t *testing.T) {
	t.Parallel()
	s := bounded(t, Config{}, "/memories/a.md")
	tests := []struct {
		name  string
		tool  string
		input map[string]any
		want  string
	}{
		{"glob stars", "Glob", map[string]any{"pattern": strings.Repeat("**/a/", 9), "path": "/memories"}, "it has 9 ** parts; the limit is 8"},
		{"glob length", "Glob", map[string]any{"pattern": strings.Repeat("a", 2000), "path": "/memories"}, "the limit is 1024"},
		{"grep filter", "Grep", map[string]any{"pattern": "x", "path": "/memories", "glob": strings.Repeat("{a,b}", 8)}, "glob filter: invalid glob pattern"},
		{"edit growth", "Edit", map[string]any{"file_path": "/memories/a.md", "old_string": "x", "new_string": strings.Repeat("y", DefaultMaxFileBytes)}, "memory and skill files may hold at most"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := runCall(t, s, tc.tool, tc.input)
			if !r.isError || !strings.Contains(r.text, tc.want) {
				t.Errorf("%s(%.60v) = %q, want an error saying %q", tc.tool, tc.input, r.text, tc.want)
			}
		})
	}
}

func TestMemoryCallDeadline(t *testing.T) {
	t.Parallel()
	s := bounded(t, Config{CallTimeout: time.Nanosecond}, deep)
	for _, name := range []string{"Glob", "Grep"} {
		pattern := bomb
		if name == "Grep" {
			pattern = "x"
		}
		r := runCall(t, s, name, map[string]any{"pattern": pattern, "path": "/memories"})
		if !r.isError || r.text != "Error: "+name+" stopped at its time limit of 1ns: narrow the pattern or path" {
			t.Errorf("%s at its deadline = %q", name, r.text)
		}
	}
}
