package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"corral.dev/pkg/tool"
	"github.com/google/uuid"
)

func TestGlob(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{})
	session := uuid.New()
	files := []string{"a.txt", "sub/b.txt", "sub/deep/c.txt", "d.go", "sub/e.go"}
	writeHost(t, d, session, map[string]string{
		"a.txt": "", "sub/b.txt": "", "sub/deep/c.txt": "", "d.go": "", "sub/e.go": "",
	})
	// Give each file its own age: files[0] is the oldest.
	base := time.Now().Add(-time.Hour)
	for i, f := range files {
		mod := base.Add(time.Duration(i) * time.Minute)
		if err := os.Chtimes(filepath.Join(d.Workspace(tenant, session), f), mod, mod); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		args    tool.GlobArgs
		want    string
		isError bool
	}{
		{"doublestar newest first", tool.GlobArgs{Pattern: "**/*.txt"}, "/workspace/sub/deep/c.txt\n/workspace/sub/b.txt\n/workspace/a.txt\n", false},
		{"top level only", tool.GlobArgs{Pattern: "*.go"}, "/workspace/d.go\n", false},
		{"under a path", tool.GlobArgs{Pattern: "*.go", Path: "/workspace/sub"}, "/workspace/sub/e.go\n", false},
		{"relative path", tool.GlobArgs{Pattern: "**/*.txt", Path: "sub"}, "/workspace/sub/deep/c.txt\n/workspace/sub/b.txt\n", false},
		{"absolute pattern", tool.GlobArgs{Pattern: "/workspace/sub/**/c.txt"}, "/workspace/sub/deep/c.txt\n", false},
		{"braces", tool.GlobArgs{Pattern: "**/*.{go,txt}", Path: "sub/deep"}, "/workspace/sub/deep/c.txt\n", false},
		{"no match", tool.GlobArgs{Pattern: "**/*.rs"}, "No files found", false},
		{"dirs are not listed", tool.GlobArgs{Pattern: "su*"}, "No files found", false},
		{"missing path", tool.GlobArgs{Pattern: "*", Path: "nope"}, "path does not exist: /workspace/nope", true},
		{"path is a file", tool.GlobArgs{Pattern: "*", Path: "a.txt"}, "/workspace/a.txt is not a directory", true},
		{"invalid pattern", tool.GlobArgs{Pattern: "[a"}, `invalid glob pattern "[a": an unclosed [`, true},
		{"dot dot in pattern", tool.GlobArgs{Pattern: "sub/../../*"}, `glob pattern "sub/../../*" must not contain ..`, true},
		{"pattern outside", tool.GlobArgs{Pattern: "/etc/*"}, "path /etc/* is outside /workspace", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := run(t, d, session, &tc.args)
			if res.Output != tc.want || res.IsError != tc.isError {
				t.Errorf("Glob(%+v) = %q (IsError %v), want %q (IsError %v)", tc.args, res.Output, res.IsError, tc.want, tc.isError)
			}
		})
	}
}

func TestGlobCapsResults(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{})
	session := uuid.New()
	if res := bash(t, d, session, "mkdir m && cd m && seq 1 1005 | xargs touch"); res.IsError {
		t.Fatalf("setup: %+v", res)
	}
	res := run(t, d, session, &tool.GlobArgs{Pattern: "m/*"})
	lines := strings.Split(strings.TrimSuffix(res.Output, "\n"), "\n")
	if len(lines) != maxGlobResults+1 || !res.Truncated {
		t.Fatalf("got %d lines (Truncated %v), want %d paths and a note", len(lines), res.Truncated, maxGlobResults)
	}
	if want := "[showing the newest 1000 of 1005 files: narrow the pattern or path]"; lines[len(lines)-1] != want {
		t.Errorf("last line = %q, want %q", lines[len(lines)-1], want)
	}
}

func TestGrep(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{})
	session := uuid.New()
	writeHost(t, d, session, map[string]string{
		"main.go":         "package main\n\nfunc hello() {}\n",
		"notes.txt":       "say Hello\nsay hello\n",
		"sub/util.go":     "// hello from util\n",
		"sub/deep/x.go":   "hello deep\n",
		"blob.bin":        "hello\x00binary",
		".git/config":     "hello git\n",
		".hidden/cfg.txt": "hello hidden\n",
	})
	tests := []struct {
		name    string
		args    tool.GrepArgs
		want    string
		isError bool
	}{
		{"everywhere", tool.GrepArgs{Pattern: "hello"}, "/workspace/.hidden/cfg.txt:1:hello hidden\n/workspace/main.go:3:func hello() {}\n/workspace/notes.txt:2:say hello\n/workspace/sub/deep/x.go:1:hello deep\n/workspace/sub/util.go:1:// hello from util\n", false},
		{"regexp", tool.GrepArgs{Pattern: `(?i)^say h`}, "/workspace/notes.txt:1:say Hello\n/workspace/notes.txt:2:say hello\n", false},
		{"base name filter", tool.GrepArgs{Pattern: "hello", Glob: "*.go"}, "/workspace/main.go:3:func hello() {}\n/workspace/sub/deep/x.go:1:hello deep\n/workspace/sub/util.go:1:// hello from util\n", false},
		{"path filter", tool.GrepArgs{Pattern: "hello", Glob: "sub/*.go"}, "/workspace/sub/util.go:1:// hello from util\n", false},
		{"path filter under a path", tool.GrepArgs{Pattern: "hello", Path: "/workspace/sub", Glob: "deep/**"}, "/workspace/sub/deep/x.go:1:hello deep\n", false},
		{"one file", tool.GrepArgs{Pattern: "hello", Path: "notes.txt"}, "/workspace/notes.txt:2:say hello\n", false},
		{"no matches", tool.GrepArgs{Pattern: "goodbye"}, "No matches found", false},
		{"invalid regexp", tool.GrepArgs{Pattern: "(unclosed"}, "invalid regular expression: error parsing regexp: missing closing ): `(unclosed`", true},
		{"invalid glob", tool.GrepArgs{Pattern: "x", Glob: "[a"}, `glob filter: invalid glob pattern "[a": an unclosed [`, true},
		{"missing path", tool.GrepArgs{Pattern: "x", Path: "nope"}, "path does not exist: /workspace/nope", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := run(t, d, session, &tc.args)
			if res.Output != tc.want || res.IsError != tc.isError {
				t.Errorf("Grep(%+v) = %q (IsError %v), want %q (IsError %v)", tc.args, res.Output, res.IsError, tc.want, tc.isError)
			}
		})
	}
}

func TestGrepCapsOutput(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{OutputLimit: 1000})
	session := uuid.New()
	var b strings.Builder
	for i := range 500 {
		fmt.Fprintf(&b, "match %d\n", i)
	}
	writeHost(t, d, session, map[string]string{"big.txt": b.String()})
	res := run(t, d, session, &tool.GrepArgs{Pattern: "match"})
	if !res.Truncated || res.IsError {
		t.Errorf("Truncated = %v, IsError = %v; want true, false", res.Truncated, res.IsError)
	}
	head, note, ok := strings.Cut(res.Output, "\n[output truncated: ")
	if !ok || len(head) != 1000 || !strings.HasSuffix(note, " bytes omitted]") {
		t.Errorf("output of %d bytes ends %q; want 1000 bytes and a truncation note", len(res.Output), res.Output[max(0, len(res.Output)-80):])
	}
	if !strings.HasPrefix(head, "/workspace/big.txt:1:match 0\n") {
		t.Errorf("output starts %q", head[:min(len(head), 40)])
	}
}
