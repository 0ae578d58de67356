// Package storetest is the conformance suite every memory store passes.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"

	"corral.dev/services/memory"
)

// Run runs the suite against stores made by newStore, one per subtest.
func Run(t *testing.T, newStore func(t *testing.T) memory.Store) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, s memory.Store)
	}{
		{"CreateAndGet", testCreateAndGet},
		{"ExpectedVersion", testExpectedVersion},
		{"OpAppliedOnce", testOpAppliedOnce},
		{"OpsOfTenantsApart", testOpsOfTenantsApart},
		{"DeleteKeepsHistory", testDeleteKeepsHistory},
		{"Scopes", testScopes},
		{"Grep", testGrep},
		{"MaxFiles", testMaxFiles},
		{"Race", testRace},
		{"SameOpAtOnce", testSameOpAtOnce},
		{"KeepsLastVersions", testKeepsLastVersions},
		{"MaxBytesCountsHistory", testMaxBytesCountsHistory},
		{"Version", testVersion},
		{"VersionsPerFile", testVersionsPerFile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newStore(t))
		})
	}
}

func put(t *testing.T, s memory.Store, k memory.Key, content string, expect int64) memory.File {
	t.Helper()
	f, err := s.Put(context.Background(), memory.Write{Key: k, Content: content, Expect: expect, By: "ada", Op: uuid.Must(uuid.NewV7())})
	if err != nil {
		t.Fatalf("Put(%s, expect %d): %v", k, expect, err)
	}
	return f
}

func key(path string) memory.Key { return memory.Key{Tenant: "acme", Path: path} }

func testCreateAndGet(t *testing.T, s memory.Store) {
	ctx := context.Background()
	k := key("/memories/notes.md")
	if _, err := s.Get(ctx, k); !errors.Is(err, memory.ErrNotFound) {
		t.Fatalf("Get before Put: %v, want ErrNotFound", err)
	}
	w := put(t, s, k, "héllo\nworld\n", 0)
	if w.Version <= 0 {
		t.Errorf("version = %d, want > 0", w.Version)
	}
	got, err := s.Get(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if got.Content != "héllo\nworld\n" || got.Version != w.Version || got.UpdatedBy != "ada" || got.Size != len("héllo\nworld\n") || got.UpdatedAt.IsZero() {
		t.Errorf("Get = %+v, want the content, version %d, by ada", got, w.Version)
	}
}

func testExpectedVersion(t *testing.T, s memory.Store) {
	ctx := context.Background()
	k := key("/memories/a.md")
	v1 := put(t, s, k, "one", 0)
	_, err := s.Put(ctx, memory.Write{Key: k, Content: "again", Expect: 0, By: "bob", Op: uuid.New()})
	var ce *memory.ConflictError
	if !errors.As(err, &ce) || ce.Current != v1.Version {
		t.Fatalf("create over an existing file: %v, want a conflict at version %d", err, v1.Version)
	}
	v2 := put(t, s, k, "two", v1.Version)
	if v2.Version <= v1.Version {
		t.Fatalf("version after update = %d, want > %d", v2.Version, v1.Version)
	}
	if _, err := s.Put(ctx, memory.Write{Key: k, Content: "stale", Expect: v1.Version, By: "bob", Op: uuid.New()}); !errors.Is(err, memory.ErrConflict) {
		t.Fatalf("write expecting a stale version: %v, want ErrConflict", err)
	}
	if _, err := s.Put(ctx, memory.Write{Key: key("/memories/none.md"), Content: "x", Expect: 7, By: "bob", Op: uuid.New()}); !errors.Is(err, memory.ErrConflict) {
		t.Fatalf("write expecting a version of a missing file: %v, want ErrConflict", err)
	}
	got, _ := s.Get(ctx, k)
	if got.Content != "two" || got.Version != v2.Version {
		t.Errorf("after refused writes: %q v%d, want %q v%d", got.Content, got.Version, "two", v2.Version)
	}
}

func testOpAppliedOnce(t *testing.T, s memory.Store) {
	ctx := context.Background()
	k := key("/skills/x/SKILL.md")
	w := memory.Write{Key: k, Content: "first", By: "ada", Op: uuid.New()}
	a, err := s.Put(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Put(ctx, w) // redelivered: expects 0, but it is its own write
	if err != nil || b.Version != a.Version {
		t.Fatalf("second Put of one op = v%d, %v; want v%d, nil", b.Version, err, a.Version)
	}
	h, err := s.History(ctx, k)
	if err != nil || len(h) != 1 {
		t.Fatalf("History = %v, %v; want one change", h, err)
	}
	if h[0].Op != w.Op || h[0].ChangedBy != "ada" || h[0].Version != a.Version {
		t.Errorf("change = %+v, want op %s by ada at v%d", h[0], w.Op, a.Version)
	}
}

// testOpsOfTenantsApart: an operation ID is one tenant's. Another tenant's
// write under the same ID (a client picks the ID of a CLI operation) is a
// write of its own, neither refused nor taken for the first.
func testOpsOfTenantsApart(t *testing.T, s memory.Store) {
	ctx := context.Background()
	op := uuid.New()
	for _, tenant := range []string{"acme", "initech"} {
		k := memory.Key{Tenant: tenant, Path: "/memories/notes.md"}
		if _, err := s.Put(ctx, memory.Write{Key: k, Content: tenant + "'s", By: "ada", Op: op}); err != nil {
			t.Fatalf("Put in %s: %v", tenant, err)
		}
		if f, err := s.Get(ctx, k); err != nil || f.Content != tenant+"'s" {
			t.Errorf("%s's file = %q, %v", tenant, f.Content, err)
		}
	}
}

func testDeleteKeepsHistory(t *testing.T, s memory.Store) {
	ctx := context.Background()
	k := key("/memories/gone.md")
	v1 := put(t, s, k, "x", 0)
	if err := s.Delete(ctx, memory.Write{Key: k, Expect: v1.Version + 100, By: "bob", Op: uuid.New()}); !errors.Is(err, memory.ErrConflict) {
		t.Fatalf("Delete at a wrong version: %v, want ErrConflict", err)
	}
	del := memory.Write{Key: k, Expect: v1.Version, By: "bob", Op: uuid.New()}
	if err := s.Delete(ctx, del); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, del); err != nil {
		t.Fatalf("redelivered Delete: %v, want nil", err)
	}
	if _, err := s.Get(ctx, k); !errors.Is(err, memory.ErrNotFound) {
		t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, memory.Write{Key: k, Expect: v1.Version, By: "bob", Op: uuid.New()}); !errors.Is(err, memory.ErrNotFound) {
		t.Fatalf("Delete of a deleted file: %v, want ErrNotFound", err)
	}
	if fs, _ := s.List(ctx, "acme", "", "/memories/"); len(fs) != 0 {
		t.Errorf("List after Delete = %v, want nothing", fs)
	}
	v3 := put(t, s, k, "back", 0)
	h, err := s.History(ctx, k)
	if err != nil || len(h) != 3 || !h[1].Deleted || h[1].ChangedBy != "bob" || h[2].Version != v3.Version || h[2].Version <= h[1].Version {
		t.Fatalf("History = %+v, %v; want created, deleted by bob, created again", h, err)
	}
}

func testScopes(t *testing.T, s memory.Store) {
	ctx := context.Background()
	put(t, s, key("/memories/shared.md"), "s", 0)
	put(t, s, memory.Key{Tenant: "acme", Owner: "ada", Path: "/memories/private/mine.md"}, "ada's", 0)
	put(t, s, memory.Key{Tenant: "acme", Owner: "bob", Path: "/memories/private/mine.md"}, "bob's", 0)
	put(t, s, memory.Key{Tenant: "other", Path: "/memories/theirs.md"}, "t", 0)
	put(t, s, key("/memories/a_b.md"), "u", 0)
	put(t, s, key("/memories/axb/c.md"), "u", 0)
	paths := func(tenant, user, prefix string) string {
		fs, err := s.List(ctx, tenant, user, prefix)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, f := range fs {
			if f.Content != "" {
				t.Errorf("List carries content of %s", f.Path)
			}
			out = append(out, f.Owner+":"+f.Path)
		}
		return strings.Join(out, " ")
	}
	for _, tc := range []struct{ tenant, user, prefix, want string }{
		{"acme", "ada", "/memories/", ":/memories/a_b.md :/memories/axb/c.md ada:/memories/private/mine.md :/memories/shared.md"},
		{"acme", "bob", "/memories/private/", "bob:/memories/private/mine.md"},
		{"acme", "eve", "/memories/private/", ""},
		{"acme", "", "/memories/a_", ":/memories/a_b.md"},
		{"other", "ada", "/", ":/memories/theirs.md"},
		{"acme", "ada", "/skills/", ""},
	} {
		if got := paths(tc.tenant, tc.user, tc.prefix); got != tc.want {
			t.Errorf("List(%s, %s, %s) = %q, want %q", tc.tenant, tc.user, tc.prefix, got, tc.want)
		}
	}
	got, err := s.Get(ctx, memory.Key{Tenant: "acme", Owner: "bob", Path: "/memories/private/mine.md"})
	if err != nil || got.Content != "bob's" {
		t.Errorf("bob's private file = %q, %v", got.Content, err)
	}
	if _, err := s.Get(ctx, memory.Key{Tenant: "other", Path: "/memories/shared.md"}); !errors.Is(err, memory.ErrNotFound) {
		t.Errorf("another tenant's Get: %v, want ErrNotFound", err)
	}
}

func testGrep(t *testing.T, s memory.Store) {
	ctx := context.Background()
	put(t, s, key("/memories/a.md"), "alpha\nbeta gamma\ndelta\n", 0)
	put(t, s, key("/memories/b.md"), "gamma ray\n", 0)
	put(t, s, key("/skills/deploy/SKILL.md"), "gamma in a skill\n", 0)
	put(t, s, memory.Key{Tenant: "acme", Owner: "bob", Path: "/memories/private/p.md"}, "gamma bob\n", 0)
	put(t, s, memory.Key{Tenant: "other", Path: "/memories/a.md"}, "gamma other\n", 0)
	got, err := s.Grep(ctx, "acme", "ada", "/memories/", "gam+a", 100)
	if err != nil {
		t.Fatal(err)
	}
	want := []memory.Match{{Path: "/memories/a.md", Line: 2, Text: "beta gamma"}, {Path: "/memories/b.md", Line: 1, Text: "gamma ray"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Grep = %v, want %v", got, want)
	}
	if got, _ := s.Grep(ctx, "acme", "bob", "/memories/private/", "^gamma", 100); len(got) != 1 || got[0].Text != "gamma bob" {
		t.Errorf("bob's Grep of his private memories = %v", got)
	}
	if got, err := s.Grep(ctx, "acme", "ada", "/memories/", `\bgamma\b`, 100); err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Grep with word boundaries = %v, %v; want %v", got, err, want)
	}
	if got, err := s.Grep(ctx, "acme", "ada", "/memories/", `\Bamma`, 100); err != nil || len(got) != 2 {
		t.Errorf("Grep with a non-boundary = %v, %v; want 2 lines", got, err)
	}
	if got, _ := s.Grep(ctx, "acme", "ada", "/", "gamma", 2); len(got) != 2 {
		t.Errorf("Grep with limit 2 = %v", got)
	}
	if _, err := s.Grep(ctx, "acme", "ada", "/", "(unclosed", 10); !errors.Is(err, memory.ErrBadPattern) {
		t.Errorf("Grep with a bad pattern: %v, want ErrBadPattern", err)
	}
}

func testMaxFiles(t *testing.T, s memory.Store) {
	ctx := context.Background()
	for i := range 3 {
		if _, err := s.Put(ctx, memory.Write{Key: key(fmt.Sprintf("/memories/%d.md", i)), Content: "x", By: "ada", Op: uuid.New(), MaxFiles: 3}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := s.Put(ctx, memory.Write{Key: key("/memories/3.md"), Content: "x", By: "ada", Op: uuid.New(), MaxFiles: 3})
	if !errors.Is(err, memory.ErrTooMany) {
		t.Fatalf("fourth file with MaxFiles 3: %v, want ErrTooMany", err)
	}
	if _, err := s.Get(ctx, key("/memories/3.md")); !errors.Is(err, memory.ErrNotFound) {
		t.Errorf("refused file exists: %v", err)
	}
	f, _ := s.Get(ctx, key("/memories/0.md"))
	if _, err := s.Put(ctx, memory.Write{Key: f.Key, Content: "y", Expect: f.Version, By: "ada", Op: uuid.New(), MaxFiles: 3}); err != nil {
		t.Errorf("updating a file at the limit: %v", err)
	}
}

// testRace has many writers update one file from the same version: exactly
// one wins, the others are refused, and the file is the winner's whole
// content.
func testRace(t *testing.T, s memory.Store) {
	ctx := context.Background()
	k := key("/memories/race.md")
	base := put(t, s, k, "base", 0)
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, errs[i] = s.Put(ctx, memory.Write{Key: k, Content: strings.Repeat(fmt.Sprint(i, ";"), 1000), Expect: base.Version, By: fmt.Sprint("w", i), Op: uuid.New()})
		})
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Errorf("writers %d and %d both won", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, memory.ErrConflict):
			t.Errorf("writer %d: %v, want ErrConflict", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no writer won")
	}
	got, err := s.Get(ctx, k)
	if err != nil || got.Content != strings.Repeat(fmt.Sprint(winner, ";"), 1000) || got.UpdatedBy != fmt.Sprint("w", winner) {
		t.Errorf("file after the race = %.20q by %s, %v; want writer %d's whole content", got.Content, got.UpdatedBy, err, winner)
	}
}

// testSameOpAtOnce has one write handled several times at once (a message
// redelivered while its first delivery still runs): it is applied once,
// and every copy reports success with the version it made.
func testSameOpAtOnce(t *testing.T, s memory.Store) {
	ctx := context.Background()
	k := key("/memories/once.md")
	prev := put(t, s, k, "base", 0)
	// Many rounds, many copies each: the copies must overlap for the test
	// to mean anything, and how often they do is up to the scheduler.
	const rounds, n = 20, 16
	for r := range rounds {
		w := memory.Write{Key: k, Content: fmt.Sprint("round ", r), Expect: prev.Version, By: "ada", Op: uuid.New()}
		var wg sync.WaitGroup
		got := make([]memory.File, n)
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() { got[i], errs[i] = s.Put(ctx, w) })
		}
		wg.Wait()
		for i := range n {
			if errs[i] != nil || got[i].Version != got[0].Version {
				t.Fatalf("round %d, copy %d: v%d, %v; want v%d, nil", r, i, got[i].Version, errs[i], got[0].Version)
			}
		}
		prev = got[0]
	}
	if h, err := s.History(ctx, k); err != nil || len(h) != rounds+1 {
		t.Errorf("History = %d changes, %v; want %d", len(h), err, rounds+1)
	}
}

// testKeepsLastVersions: a file keeps its last [memory.Versions]
// versions; older ones are pruned as new ones are written.
func testKeepsLastVersions(t *testing.T, s memory.Store) {
	ctx := context.Background()
	k := key("/memories/busy.md")
	var made []memory.File
	var prev int64
	for i := range memory.Versions + 5 {
		f := put(t, s, k, fmt.Sprint("version ", i), prev)
		made, prev = append(made, f), f.Version
	}
	h, err := s.History(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != memory.Versions || h[0].Version != made[5].Version || h[len(h)-1].Version != prev {
		t.Fatalf("History = %d changes, v%d to v%d; want the last %d, v%d to v%d", len(h), h[0].Version, h[len(h)-1].Version, memory.Versions, made[5].Version, prev)
	}
	if _, err := s.Version(ctx, k, made[4].Version); !errors.Is(err, memory.ErrNotFound) {
		t.Errorf("a pruned version: %v, want ErrNotFound", err)
	}
	if f, err := s.Version(ctx, k, made[5].Version); err != nil || f.Content != "version 5" {
		t.Errorf("the oldest kept version = %q, %v; want %q", f.Content, err, "version 5")
	}
	if f, err := s.Get(ctx, k); err != nil || f.Version != prev {
		t.Errorf("Get = v%d, %v; want v%d", f.Version, err, prev)
	}
}

// storedBytes sums what a tenant's files keep, from their histories.
func storedBytes(t *testing.T, s memory.Store, keys ...memory.Key) int {
	t.Helper()
	n := 0
	for _, k := range keys {
		h, err := s.History(context.Background(), k)
		if err != nil {
			t.Fatalf("History(%s): %v", k, err)
		}
		for _, c := range h {
			n += c.Size
		}
	}
	return n
}

// testMaxBytesCountsHistory: a tenant's stored bytes, kept versions
// included, stay within MaxBytes: a write prunes the oldest versions
// first, and fails, changing nothing, when only the files' latest
// versions would still not fit.
func testMaxBytesCountsHistory(t *testing.T, s memory.Store) {
	ctx := context.Background()
	const maxBytes = 1000
	w := func(k memory.Key, size int, expect int64) (memory.File, error) {
		return s.Put(ctx, memory.Write{Key: k, Content: strings.Repeat("x", size), Expect: expect, By: "ada", Op: uuid.New(), MaxBytes: maxBytes})
	}
	a, b := key("/memories/a.md"), memory.Key{Tenant: "acme", Owner: "bob", Path: "/memories/private/b.md"}
	var prev int64
	for i := range 5 { // 5 versions of 300 bytes: 1500 bytes, history included
		f, err := w(a, 300, prev)
		if err != nil {
			t.Fatalf("write %d of a: %v", i, err)
		}
		prev = f.Version
	}
	if n := storedBytes(t, s, a); n > maxBytes {
		t.Errorf("a keeps %d bytes, more than the tenant's %d", n, maxBytes)
	}
	if h, _ := s.History(ctx, a); len(h) != 3 || h[2].Version != prev {
		t.Errorf("a's history = %+v, want its last 3 versions", h)
	}
	// Another user's file makes room by pruning a's old versions.
	if _, err := w(b, 600, 0); err != nil {
		t.Fatalf("b: %v", err)
	}
	if n := storedBytes(t, s, a, b); n > maxBytes {
		t.Errorf("the tenant keeps %d bytes, more than its %d", n, maxBytes)
	}
	if h, _ := s.History(ctx, a); len(h) != 1 || h[0].Version != prev {
		t.Errorf("a's history after b = %+v, want only its latest", h)
	}
	// No room left: 300 + 600 + 200 even with nothing old kept.
	if _, err := w(key("/memories/c.md"), 200, 0); !errors.Is(err, memory.ErrFull) {
		t.Fatalf("a write past the bound: %v, want ErrFull", err)
	}
	if _, err := s.Get(ctx, key("/memories/c.md")); !errors.Is(err, memory.ErrNotFound) {
		t.Errorf("the refused file exists: %v", err)
	}
	if f, err := s.Get(ctx, a); err != nil || f.Version != prev || len(f.Content) != 300 {
		t.Errorf("a after the refusal = v%d, %d bytes, %v; want v%d, 300 bytes", f.Version, len(f.Content), err, prev)
	}
	// Another tenant has its own bound.
	if _, err := w(memory.Key{Tenant: "other", Path: "/memories/c.md"}, 900, 0); err != nil {
		t.Errorf("another tenant's write: %v", err)
	}
}

// testVersion: each kept version can be read back; a removal has no
// content.
func testVersion(t *testing.T, s memory.Store) {
	ctx := context.Background()
	k := key("/memories/v.md")
	v1 := put(t, s, k, "one", 0)
	v2 := put(t, s, k, "two", v1.Version)
	if err := s.Delete(ctx, memory.Write{Key: k, Expect: v2.Version, By: "bob", Op: uuid.New()}); err != nil {
		t.Fatal(err)
	}
	if f, err := s.Version(ctx, k, v1.Version); err != nil || f.Content != "one" || f.Version != v1.Version || f.UpdatedBy != "ada" {
		t.Errorf("Version(v%d) = %+v, %v; want %q by ada", v1.Version, f, err, "one")
	}
	h, _ := s.History(ctx, k)
	if _, err := s.Version(ctx, k, h[len(h)-1].Version); !errors.Is(err, memory.ErrNotFound) {
		t.Errorf("Version of the removal: %v, want ErrNotFound", err)
	}
	if _, err := s.Version(ctx, memory.Key{Tenant: "other", Path: k.Path}, v1.Version); !errors.Is(err, memory.ErrNotFound) {
		t.Errorf("another tenant's Version: %v, want ErrNotFound", err)
	}
	if _, err := s.Version(ctx, k, 999999); !errors.Is(err, memory.ErrNotFound) {
		t.Errorf("Version of a version never made: %v, want ErrNotFound", err)
	}
}

// A file's versions are its own: its first write is version 1, whatever
// other files were written before, and each change adds one, a removal
// too; a file written again after its removal goes on counting.
func testVersionsPerFile(t *testing.T, s memory.Store) {
	ctx := context.Background()
	put(t, s, key("/memories/other.md"), "x", 0)
	o := put(t, s, key("/memories/other.md"), "y", 1)
	a, b := key("/memories/a.md"), key("/memories/b.md")
	if f := put(t, s, a, "one", 0); f.Version != 1 {
		t.Errorf("a's first write is version %d, want 1 (other.md is at %d)", f.Version, o.Version)
	}
	if f := put(t, s, b, "one", 0); f.Version != 1 {
		t.Errorf("b's first write is version %d, want 1", f.Version)
	}
	if f := put(t, s, a, "two", 1); f.Version != 2 {
		t.Errorf("a's second write is version %d, want 2", f.Version)
	}
	if err := s.Delete(ctx, memory.Write{Key: a, Expect: 2, By: "ada", Op: uuid.New()}); err != nil {
		t.Fatal(err)
	}
	if f := put(t, s, a, "three", 0); f.Version != 4 {
		t.Errorf("a written after its removal (version 3) is version %d, want 4", f.Version)
	}
	if f, err := s.Version(ctx, a, 2); err != nil || f.Content != "two" {
		t.Errorf("a's version 2 = %+v, %v; want its second write", f, err)
	}
	h, err := s.History(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	var vs []int64
	for _, c := range h {
		vs = append(vs, c.Version)
	}
	if fmt.Sprint(vs) != "[1 2 3 4]" {
		t.Errorf("a's history has versions %v, want [1 2 3 4]", vs)
	}
}
