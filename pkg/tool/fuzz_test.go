package tool

import (
	"encoding/json"
	"errors"
	"path"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParse checks that what Parse accepts is what everyone else reading
// the same input sees: the policy and the reviewers read the arguments as
// a plain JSON object, so every key of it must be a field Parse took, by
// its exact name, with the value Parse took. Paths it accepts have no
// control characters and fit the bound.
func FuzzParse(f *testing.F) {
	for _, s := range []struct{ name, input string }{
		{Bash, `{"command":"ls -la","timeout":1000,"description":"list"}`},
		{Read, `{"file_path":"/workspace/a.go","offset":2,"limit":3}`},
		{Write, `{"file_path":"notes.md","content":"hello\n"}`},
		{Edit, `{"file_path":"a","old_string":"x","new_string":"y","replace_all":true}`},
		{Glob, `{"pattern":"**/*.go","path":"/memories"}`},
		{Grep, `{"pattern":"TODO","path":"src","glob":"*.go"}`},
		{Read, `{"file_path":"a\u0000b"}`},
		{"Delete", `{}`},
		{Bash, ``},
		{Bash, `{"command":"0","description":""}`},
	} {
		f.Add(s.name, []byte(s.input))
	}
	f.Fuzz(func(t *testing.T, name string, input []byte) {
		args, err := Parse(name, input)
		if err != nil {
			if !errors.Is(err, ErrUnknownTool) && !errors.Is(err, ErrInvalidArgs) {
				t.Fatalf("Parse(%q, %q): error %v wraps neither ErrUnknownTool nor ErrInvalidArgs", name, input, err)
			}
			return
		}
		// The policy's view: a JSON object, or nothing.
		var seen map[string]any
		if len(strings.TrimSpace(string(input))) > 0 {
			if err := json.Unmarshal(input, &seen); err != nil {
				t.Fatalf("Parse(%q, %q) accepted what is no JSON object: %v", name, input, err)
			}
		}
		// Parse's view, as a JSON object.
		out, err := json.Marshal(args)
		if err != nil {
			t.Fatal(err)
		}
		var took map[string]any
		if err := json.Unmarshal(out, &took); err != nil {
			t.Fatal(err)
		}
		for k, v := range seen {
			tv, ok := took[k]
			if !ok && zeroJSON(v) {
				continue // left out of the encoding when empty
			}
			if !reflect.DeepEqual(tv, v) {
				t.Fatalf("Parse(%q, %q): the input's %q is %#v, Parse took %#v", name, input, k, v, took[k])
			}
		}
		for k, v := range took {
			if _, ok := seen[k]; !ok && !reflect.ValueOf(v).IsZero() {
				t.Fatalf("Parse(%q, %q): took %q = %#v, which the input does not hold", name, input, k, v)
			}
		}
		// Parsing what Parse took gives the same.
		again, err := Parse(name, out)
		if err != nil || !reflect.DeepEqual(again, args) {
			t.Fatalf("Parse(%q, %q) = %#v, but its encoding %s parses to %#v, %v", name, input, args, out, again, err)
		}
		for _, p := range []any{took["file_path"], took["path"]} {
			s, _ := p.(string)
			if len(s) > MaxPathBytes || strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
				t.Fatalf("Parse(%q, %q) accepted the path %q", name, input, s)
			}
		}
	})
}

// FuzzWorkspacePath checks that a path WorkspacePath accepts names
// something inside /workspace, in its one clean form.
func FuzzWorkspacePath(f *testing.F) {
	for _, p := range []string{"", ".", "a/b.go", "/workspace", "/workspace/", "/workspace/src/../x", "../etc/passwd",
		"/etc/passwd", "/workspace/../workspace2/x", "/workspacefoo", "a/../../b", "//workspace//a", "./a/./b/"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		rel, err := WorkspacePath(p)
		if err != nil {
			if !errors.Is(err, ErrPathOutside) {
				t.Fatalf("WorkspacePath(%q): error %v does not wrap ErrPathOutside", p, err)
			}
			return
		}
		if rel == "." {
			return
		}
		if path.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, "../") || path.Clean(rel) != rel {
			t.Fatalf("WorkspacePath(%q) = %q: not a clean path inside the workspace", p, rel)
		}
		if full := path.Join(Workspace, rel); !strings.HasPrefix(full, Workspace+"/") {
			t.Fatalf("WorkspacePath(%q) = %q, which is %s", p, rel, full)
		}
	})
}

// FuzzMemoryPath checks that a path MemoryPath accepts is in /memories or
// /skills, already clean (nothing resolved), valid UTF-8 without control
// characters, and within the bounds.
func FuzzMemoryPath(f *testing.F) {
	for _, p := range []string{"/memories", "/memories/", "/memories/notes.md", "/memories/private/me.md", "/skills/pdf/SKILL.md",
		"/memories/../etc", "/memories//a", "/memories/./a", "/skills/a\x00b", "/memoriesx/a", "/memories/\xff", "memories/a"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		q, err := MemoryPath(p)
		if err != nil {
			if !errors.Is(err, ErrBadMemoryPath) {
				t.Fatalf("MemoryPath(%q): error %v does not wrap ErrBadMemoryPath", p, err)
			}
			return
		}
		switch {
		case !IsMemoryPath(q):
			t.Fatalf("MemoryPath(%q) = %q: not under %s or %s", p, q, Memories, Skills)
		case path.Clean(q) != q:
			t.Fatalf("MemoryPath(%q) = %q: not clean (%q)", p, q, path.Clean(q))
		case !utf8.ValidString(q) || strings.ContainsFunc(q, func(r rune) bool { return r < 0x20 || r == 0x7f }):
			t.Fatalf("MemoryPath(%q) = %q: invalid UTF-8 or a control character", p, q)
		case len(q) > MaxMemoryPathBytes || q != strings.TrimSuffix(p, "/"):
			t.Fatalf("MemoryPath(%q) = %q", p, q)
		}
		if again, err := MemoryPath(q); err != nil || again != q {
			t.Fatalf("MemoryPath(%q) = %q, but MemoryPath(%q) = %q, %v", p, q, q, again, err)
		}
	})
}

// zeroJSON reports whether v, decoded from JSON, is its type's zero value
// (what an encoding with omitempty leaves out).
func zeroJSON(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case string:
		return v == ""
	case bool:
		return !v
	case float64:
		return v == 0
	}
	return false
}
