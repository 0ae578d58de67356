package tool_test

import (
	"errors"
	"strings"
	"testing"

	"corral.dev/pkg/tool"
)

func TestMemoryPath(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		bad      string // part of the error, if refused
	}{
		{in: "/memories/notes.md", want: "/memories/notes.md"},
		{in: "/memories/a/b/", want: "/memories/a/b"},
		{in: "/memories", want: "/memories"},
		{in: "/skills/deploy/SKILL.md", want: "/skills/deploy/SKILL.md"},
		{in: "/memories/private/x.md", want: "/memories/private/x.md"},
		{in: "/memories/../etc/passwd", bad: `".." segment`},
		{in: "/memories/./a", bad: `"." segment`},
		{in: "/memories//a", bad: "empty segment"},
		{in: "/memories/a\x00b", bad: "control character"},
		{in: "/memories/a\nb", bad: "control character"},
		{in: "/memories/a\u009b2Jb", bad: "control character"},
		{in: "/memories/a\u0085b", bad: "control character"},
		{in: "/memories/café.md", want: "/memories/café.md"},
		{in: "/memories/\xff", bad: "UTF-8"},
		{in: "/memories/" + strings.Repeat("a", 600), bad: "longer than 512"},
		{in: "/memories/" + strings.Repeat("a", 256), bad: "longer than 255"},
		{in: "/workspace/a", bad: "not under"},
		{in: "/memoriesx/a", bad: "not under"},
		{in: "memories/a", bad: "not under"},
	} {
		got, err := tool.MemoryPath(tc.in)
		switch {
		case tc.bad != "" && (err == nil || !errors.Is(err, tool.ErrBadMemoryPath) || !strings.Contains(err.Error(), tc.bad)):
			t.Errorf("MemoryPath(%q) = %q, %v; want an error about %s", tc.in, got, err, tc.bad)
		case tc.bad == "" && (err != nil || got != tc.want):
			t.Errorf("MemoryPath(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestForMemory(t *testing.T) {
	for _, tc := range []struct {
		name  string
		input string
		want  bool
	}{
		{"Read", `{"file_path":"/memories/a.md"}`, true},
		{"Write", `{"file_path":"/skills/x/SKILL.md","content":""}`, true},
		{"Glob", `{"pattern":"*","path":"/memories"}`, true},
		{"Grep", `{"pattern":"x","path":"/skills"}`, true},
		{"Glob", `{"pattern":"/memories/*"}`, false},
		{"Read", `{"file_path":"/workspace/memories/a.md"}`, false},
		{"Read", `{"file_path":"memories/a.md"}`, false},
		{"Bash", `{"command":"cat /memories/a.md"}`, false},
	} {
		args, err := tool.Parse(tc.name, []byte(tc.input))
		if err != nil {
			t.Fatal(err)
		}
		if got := tool.ForMemory(args); got != tc.want {
			t.Errorf("ForMemory(%s %s) = %v, want %v", tc.name, tc.input, got, tc.want)
		}
	}
}
