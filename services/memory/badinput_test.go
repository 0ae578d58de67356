package memory_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/natstest"
	"corral.dev/services/memory"
)

// Calls with bad paths, content or arguments get error results that say
// what is wrong, and write nothing; so do the API's requests.
func TestBadInputWritesNothing(t *testing.T) {
	s := startService(t, "postgres", memory.Config{})
	ada := newSession("acme", "ada")
	for _, tc := range []struct {
		name  string
		tool  string
		input any
		want  string
	}{
		{"dot-dot", "Write", writeArgs("/memories/../etc/passwd", "x"), `has a ".." segment`},
		{"dot-dot into another's private memories", "Read", readArgs("/memories/private/../../memories/private/x"), `has a ".." segment`},
		{"empty segment", "Write", writeArgs("/memories//double.md", "x"), "empty segment (//)"},
		{"long path", "Write", writeArgs("/memories/"+strings.Repeat("a", 600), "x"), "longer than 512 bytes"},
		{"control character", "Write", writeArgs("/memories/ctl\x01.md", "x"), "control character"},
		{"outside memories", "Read", readArgs("/workspace/notes.md"), "is not a call on /memories or /skills"},
		{"shell", "Bash", map[string]any{"command": "cat /memories/notes.md"}, "is not a call on /memories or /skills"},
		{"NUL byte", "Write", writeArgs("/memories/bin.md", "a\x00b"), "text only"},
		{"too big", "Write", writeArgs("/memories/big.md", strings.Repeat("x", 300<<10)), "may hold at most 262144"},
		{"a root", "Write", writeArgs("/memories", "x"), "/memories is a directory: write a file inside it"},
		{"the private root", "Write", writeArgs("/memories/private", "x"), "is a directory"},
		{"a loose skill file", "Write", writeArgs("/skills/loose.md", "x"), "a skill is a folder"},
		{"a skill without front matter", "Write", writeArgs("/skills/s/SKILL.md", "no front matter"), "front matter"},
		{"a skill named for another folder", "Write", writeArgs("/skills/s/SKILL.md", "---\nname: t\ndescription: d\n---\n"), `must be its folder's name, "s"`},
		{"an empty root", "Read", readArgs("/memories"), "/memories does not exist"},
		{"a bad pattern", "Grep", map[string]any{"pattern": "(", "path": "/memories"}, "invalid pattern"},
		{"a NUL in a pattern", "Grep", map[string]any{"pattern": "a\x00", "path": "/memories"}, "pattern contains a NUL byte"},
		{"a bad glob", "Glob", map[string]any{"pattern": "{a,", "path": "/memories"}, "glob"},
		{"unknown tool", "Delete", readArgs("/memories/notes.md"), `unknown tool "Delete"`},
		{"unknown field", "Read", map[string]any{"path": "/memories/notes.md"}, `unknown field "path"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.refused(t, ada, tc.tool, tc.input, tc.want)
		})
	}

	for _, tc := range []struct {
		name string
		req  memory.APIRequest
		want string
	}{
		{"dot-dot", memory.APIRequest{Path: "/memories/../etc/passwd", Content: "x"}, `".." segment`},
		{"outside memories", memory.APIRequest{Path: "/etc/passwd", Content: "x"}, "is not under /memories or /skills"},
		{"NUL byte", memory.APIRequest{Path: "/memories/bin.md", Content: "a\x00b"}, "text only"},
		{"a loose skill file", memory.APIRequest{Path: "/skills/loose.md", Content: "x"}, "a skill is a folder"},
		{"a skill without front matter", memory.APIRequest{Path: "/skills/s/SKILL.md", Content: "no front matter"}, "front matter"},
	} {
		t.Run("put "+tc.name, func(t *testing.T) {
			if resp, errDesc := s.api(t, "acme", "ada", memory.OpPut, tc.req); !strings.HasPrefix(errDesc, "400") || !strings.Contains(errDesc, tc.want) {
				t.Errorf("put = %+v, %q; want a 400 saying %q", resp, errDesc, tc.want)
			}
		})
	}
	if resp, errDesc := ask(t, s.js, memory.Subject("acme", "ada", memory.OpPut), memory.APIRequest{Path: "/memories/x.md", Content: "x"}); !strings.Contains(errDesc, "op is required") {
		t.Errorf("put without an op = %+v, %q", resp, errDesc)
	}

	if ls := s.apiOK(t, "acme", "ada", memory.OpList, memory.APIRequest{Path: "/"}); len(ls.Files) != 0 {
		t.Errorf("after refused writes, ls / = %s; want nothing", paths(ls.Files))
	}
}

// A call the harness did not sign, or signed for another service, or
// changed after signing, is not run: it is dead-lettered, and no result is
// recorded for it.
func TestUnsignedCallsAreNotRun(t *testing.T) {
	s := startService(t, "postgres", memory.Config{})
	_, otherKey, _ := ed25519.GenerateKey(nil)
	for name, sign := range map[string]func(c *event.ToolCall){
		"unsigned":               func(c *event.ToolCall) { c.Signature = nil },
		"signed by another key":  func(c *event.ToolCall) { c.Sign(otherKey, bus.ServiceMemory) },
		"signed for the sandbox": func(c *event.ToolCall) { c.Sign(s.key, bus.ServiceSandbox) },
		"signed for a preview":   func(c *event.ToolCall) { c.SignPreview(s.key, bus.ServiceMemory) },
		"changed after signing":  func(c *event.ToolCall) { c.Sign(s.key, bus.ServiceMemory); c.User = "mallory" },
	} {
		t.Run(name, func(t *testing.T) {
			sess := newSession("acme", "ada")
			input, _ := json.Marshal(writeArgs("/memories/planted.md", "planted"))
			c := event.ToolCall{Header: event.NewHeader(event.TypeToolCall, "acme", sess.id), Call: sess.id, Turn: 1, User: "ada", Name: "Write", Input: input}
			sign(&c)
			data, _ := json.Marshal(&c)
			ack, err := s.js.Publish(context.Background(), bus.ToolSubject(bus.ServiceMemory, "acme", sess.id), data)
			if err != nil {
				t.Fatal(err)
			}
			natstest.WaitFor(t, 10*time.Second, func() error {
				msgs, err := bus.ReadAll(context.Background(), s.js, bus.StreamDeadLetter, "deadletter.TOOLS.>")
				if err != nil {
					return err
				}
				for _, m := range msgs {
					var dl event.DeadLetter
					if json.Unmarshal(m.Data, &dl) == nil && dl.StreamSeq == ack.Sequence {
						return nil
					}
				}
				return fmt.Errorf("no dead letter of the call")
			})
			if rs := results(t, s.js, "acme", sess.id); len(rs) != 0 {
				t.Errorf("results recorded: %+v", rs)
			}
		})
	}
	if _, errDesc := s.api(t, "acme", "ada", memory.OpGet, memory.APIRequest{Path: "/memories/planted.md"}); errDesc == "" {
		t.Error("a call the harness did not sign was run")
	}
}
