package memory_test

import (
	"strings"
	"testing"

	"corral.dev/services/memory"
)

// versionsOf returns the versions log lists of a file, for user of acme.
func (s *service) versionsOf(t *testing.T, user, p string) []memory.APIVersion {
	t.Helper()
	return s.apiOK(t, "acme", user, memory.OpLog, memory.APIRequest{Path: p}).Versions
}

// log lists a file's versions, oldest first, with size and writer; restore
// writes one back as the newest, over whatever is there, and creates a
// removed file again; a version never made, or a removal, has nothing to
// restore. A private memory's history is its user's alone.
func TestHistoryAndRestore(t *testing.T) {
	forEachStore(t, func(t *testing.T, store string) {
		s := startService(t, store, memory.Config{})
		const p = "/memories/notes.md"
		for i, who := range []string{"ada", "bob", "ada"} {
			s.apiOK(t, "acme", who, memory.OpPut, memory.APIRequest{Path: p, Content: "draft " + string(rune('1'+i)) + "\n"})
		}
		vs := s.versionsOf(t, "carol", p)
		if len(vs) != 3 {
			t.Fatalf("log lists %+v, want 3 versions", vs)
		}
		for i, who := range []string{"ada", "bob", "ada"} {
			if v := vs[i]; v.Version != int64(i+1) || v.Size != 8 || v.ChangedBy != who || v.Removed || v.ChangedAt.IsZero() {
				t.Errorf("version %d = %+v, want version %d of 8 bytes by %s", i, v, i+1, who)
			}
		}

		restored := s.apiOK(t, "acme", "bob", memory.OpRestore, memory.APIRequest{Path: p, Version: 1})
		if f := restored.Files[0]; f.Version != 4 || f.UpdatedBy != "bob" {
			t.Errorf("restore = %+v, want version 4 by bob", f)
		}
		if cat := s.apiOK(t, "acme", "ada", memory.OpGet, memory.APIRequest{Path: p}); cat.Files[0].Content != "draft 1\n" {
			t.Errorf("after restoring version 1, %s = %q", p, cat.Files[0].Content)
		}
		// A session that read version 3 may not overwrite the restore.
		ada := newSession("acme", "ada")
		ada.seen[p] = 3
		s.refused(t, ada, "Write", writeArgs(p, "mine\n"), "has changed since this session last read it")

		for _, tc := range []struct {
			name string
			req  memory.APIRequest
			want string
		}{
			{"a version never made", memory.APIRequest{Path: p, Version: 999999}, "no version 999999"},
			{"no version", memory.APIRequest{Path: p}, "version is required"},
			{"no such file", memory.APIRequest{Path: "/memories/none.md", Version: 1}, "no version 1"},
		} {
			if resp, errDesc := s.api(t, "acme", "ada", memory.OpRestore, tc.req); !strings.HasPrefix(errDesc, "400") || !strings.Contains(errDesc, tc.want) {
				t.Errorf("restore of %s = %+v, %q; want a 400 saying %q", tc.name, resp, errDesc, tc.want)
			}
		}

		// A removal is kept in the history; restoring creates the file
		// again, and the removal itself has nothing to restore.
		s.apiOK(t, "acme", "ada", memory.OpRemove, memory.APIRequest{Path: p})
		vs = s.versionsOf(t, "ada", p)
		if len(vs) != 5 || !vs[4].Removed || vs[4].ChangedBy != "ada" {
			t.Fatalf("log after rm = %+v, want a 5th version, ada's removal", vs)
		}
		if _, errDesc := s.api(t, "acme", "ada", memory.OpRestore, memory.APIRequest{Path: p, Version: 5}); !strings.Contains(errDesc, "no version 5 with content") {
			t.Errorf("restore of a removal = %q", errDesc)
		}
		s.apiOK(t, "acme", "ada", memory.OpRestore, memory.APIRequest{Path: p, Version: 2})
		if got := s.ok(t, newSession("acme", "bob"), "Read", readArgs(p)); got != "     1\tdraft 2\n" {
			t.Errorf("Read after restoring a removed file = %q", got)
		}

		// Private memories are their user's, history too.
		const private = "/memories/private/plan.md"
		s.apiOK(t, "acme", "ada", memory.OpPut, memory.APIRequest{Path: private, Content: "ada's plan\n"})
		if resp, errDesc := s.api(t, "acme", "bob", memory.OpLog, memory.APIRequest{Path: private}); !strings.Contains(errDesc, memory.ErrNotFound.Error()) {
			t.Errorf("bob's log of ada's private memory = %+v, %q; want not found", resp, errDesc)
		}
		if _, errDesc := s.api(t, "acme", "bob", memory.OpRestore, memory.APIRequest{Path: private, Version: 1}); errDesc == "" {
			t.Errorf("bob restored ada's private memory")
		}
		if vs := s.versionsOf(t, "ada", private); len(vs) != 1 || vs[0].ChangedBy != "ada" {
			t.Errorf("ada's log of her private memory = %+v", vs)
		}
	})
}

// A tenant's stored bytes, every kept version included, are bounded: a
// write past the bound is refused with a clear message, to the CLI and to
// the model, and changes nothing; one that fits only once old versions are
// pruned prunes them.
func TestTenantByteBound(t *testing.T) {
	forEachStore(t, func(t *testing.T, store string) {
		s := startService(t, store, memory.Config{MaxTenantBytes: 1000})
		const p = "/memories/notes.md"
		for _, content := range []string{"draft 1\n", "draft 2\n", "draft 3\n"} {
			s.apiOK(t, "acme", "ada", memory.OpPut, memory.APIRequest{Path: p, Content: content})
		}
		// 24 bytes kept so far: pruning notes.md's old versions leaves
		// too few.
		resp, errDesc := s.api(t, "acme", "ada", memory.OpPut, memory.APIRequest{Path: "/memories/huge.md", Content: strings.Repeat("h", 995)})
		if !strings.HasPrefix(errDesc, "400") || !strings.Contains(errDesc, "memory storage full") || !strings.Contains(errDesc, "may store at most 1000") {
			t.Errorf("a put past the tenant's bound = %+v, %q", resp, errDesc)
		}
		ada, bob := newSession("acme", "ada"), newSession("acme", "bob")
		if got := s.ok(t, ada, "Write", writeArgs("/memories/big.md", strings.Repeat("b", 700))); !strings.HasPrefix(got, "Wrote 700 bytes to /memories/big.md") {
			t.Errorf("the model's write = %q", got)
		}
		s.refused(t, bob, "Write", writeArgs("/memories/another.md", strings.Repeat("a", 700)), "memory storage full")
		s.refused(t, bob, "Write", writeArgs("/memories/private/another.md", strings.Repeat("a", 700)), "remove files you no longer need")
		for _, q := range []string{"/memories/huge.md", "/memories/another.md"} {
			if _, errDesc := s.api(t, "acme", "ada", memory.OpGet, memory.APIRequest{Path: q}); errDesc == "" {
				t.Errorf("%s was written past the bound", q)
			}
		}
		if vs := s.versionsOf(t, "ada", p); len(vs) != 3 {
			t.Errorf("the refused writes pruned %s: %+v", p, vs)
		}
		// 290 more bytes fit only with notes.md's first two versions pruned.
		s.apiOK(t, "acme", "ada", memory.OpPut, memory.APIRequest{Path: "/memories/more.md", Content: strings.Repeat("m", 290)})
		if vs := s.versionsOf(t, "ada", p); len(vs) != 1 || vs[0].Version != 3 {
			t.Errorf("after a write that needed room, %s's versions = %+v; want its latest alone", p, vs)
		}
		// Another tenant has its own bound.
		s.ok(t, newSession("initech", "ada"), "Write", writeArgs("/memories/big.md", strings.Repeat("b", 990)))
	})
}
