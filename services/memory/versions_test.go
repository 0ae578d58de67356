package memory_test

import (
	"fmt"
	"strings"
	"testing"

	"corral.dev/pkg/event"
	"corral.dev/services/memory"
)

// A Write or Edit of a file that exists is refused unless the session read
// it and it has not changed since, with a message to read it again; after
// reading, it goes through. A new file needs no read; an Edit cannot make
// one.
func TestWritesNeedAFreshRead(t *testing.T) {
	forEachStore(t, func(t *testing.T, store string) {
		s := startService(t, store, memory.Config{})
		ada, bob := newSession("acme", "ada"), newSession("acme", "bob")
		const p = "/memories/team.md"
		s.ok(t, ada, "Write", writeArgs(p, "v1\n"))

		s.refused(t, bob, "Write", writeArgs(p, "blind\n"), p+" already exists and this session has not read it: Read it first")
		s.refused(t, bob, "Edit", editArgs(p, "v1", "blind"), p+" already exists and this session has not read it: Read it first")
		s.ok(t, bob, "Read", readArgs(p))
		if got := s.ok(t, bob, "Write", writeArgs(p, "v2\n")); got != "Wrote 3 bytes to "+p+" (version 2)" {
			t.Errorf("bob's Write after his Read = %q", got)
		}

		// Ada last saw version 1.
		s.refused(t, ada, "Write", writeArgs(p, "stale\n"), p+" has changed since this session last read it: Read it again")
		s.refused(t, ada, "Edit", editArgs(p, "v2", "stale"), p+" has changed since this session last read it: Read it again")
		s.ok(t, ada, "Read", readArgs(p))
		s.refused(t, ada, "Edit", editArgs(p, "v9", "v3"), "old_string not found in "+p)
		if got := s.ok(t, ada, "Edit", editArgs(p, "v2", "v3")); got != "Edited "+p+" (version 3)" {
			t.Errorf("ada's Edit after her Read = %q", got)
		}
		// Her own write is what she saw last.
		s.ok(t, ada, "Edit", editArgs(p, "v3", "v4"))
		s.refused(t, ada, "Edit", editArgs("/memories/new.md", "a", "b"), "/memories/new.md does not exist: use Write to create it")

		cat := s.apiOK(t, "acme", "bob", memory.OpGet, memory.APIRequest{Path: p})
		if f := cat.Files[0]; f.Content != "v4\n" || f.Version != 4 || f.UpdatedBy != "ada" {
			t.Errorf("%s = %+v, want ada's version 4", p, f)
		}
	})
}

// Sessions that read one file and then write it at once: exactly one write
// wins, the others are told to read it again, and the file holds the
// winner's whole content.
func TestWriteRace(t *testing.T) {
	forEachStore(t, func(t *testing.T, store string) {
		s := startService(t, store, memory.Config{Concurrency: 8})
		const n, p = 8, "/memories/shared.md"
		s.apiOK(t, "acme", "ada", memory.OpPut, memory.APIRequest{Path: p, Content: "base\n"})
		content := func(i int) string { return strings.Repeat(fmt.Sprintf("writer %d\n", i), 200) }
		sessions := make([]*session, n)
		for i := range sessions {
			sessions[i] = newSession("acme", fmt.Sprint("user", i))
			s.ok(t, sessions[i], "Read", readArgs(p))
		}
		calls := make([]*event.ToolCall, n)
		for i, sess := range sessions {
			calls[i] = s.send(t, sess, "Write", writeArgs(p, content(i)))
		}
		winner := -1
		for i, sess := range sessions {
			r := s.result(t, sess, calls[i])
			switch {
			case !r.IsError && winner >= 0:
				t.Errorf("sessions %d and %d both wrote: %q", winner, i, r.Output)
			case !r.IsError:
				winner = i
			case !strings.Contains(r.Output, "has changed since this session last read it: Read it again"):
				t.Errorf("session %d neither won nor was told to read again: %q", i, r.Output)
			}
		}
		if winner < 0 {
			t.Fatal("no session wrote")
		}
		if cat := s.apiOK(t, "acme", "ada", memory.OpGet, memory.APIRequest{Path: p}); cat.Files[0].Content != content(winner) || cat.Files[0].Version != 2 {
			t.Errorf("%s is not session %d's whole content as version 2: %.60q, version %d", p, winner, cat.Files[0].Content, cat.Files[0].Version)
		}
	})
}

// A tenant may hold only so many files: the write past the limit is
// refused, says what to do, and writes nothing; another tenant has its own
// limit.
func TestTenantFileLimit(t *testing.T) {
	s := startService(t, "postgres", memory.Config{MaxFiles: 2})
	ada := newSession("acme", "ada")
	s.ok(t, ada, "Write", writeArgs("/memories/1.md", "a"))
	s.ok(t, ada, "Write", writeArgs("/memories/2.md", "b"))
	s.refused(t, ada, "Write", writeArgs("/memories/3.md", "c"), "too many files: tenant acme has 2 files")
	s.refused(t, ada, "Write", writeArgs("/memories/private/3.md", "c"), "remove files you no longer need first")
	if resp, errDesc := s.api(t, "acme", "ada", memory.OpGet, memory.APIRequest{Path: "/memories/3.md"}); errDesc == "" {
		t.Errorf("the file past the limit was written: %+v", resp)
	}
	// Rewriting a file the tenant holds is no new file.
	s.ok(t, ada, "Write", writeArgs("/memories/2.md", "b2"))
	s.ok(t, newSession("initech", "ada"), "Write", writeArgs("/memories/3.md", "c"))
}
