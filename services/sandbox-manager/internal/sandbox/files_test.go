package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"corral.dev/pkg/tool"
	"github.com/google/uuid"
)

// writeHost writes files into a session's workspace from the host side.
func writeHost(t *testing.T, d *Driver, session uuid.UUID, files map[string]string) {
	t.Helper()
	ws := d.Workspace(tenant, session)
	for name, content := range files {
		p := filepath.Join(ws, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestWriteThenRead(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{})
	session := uuid.New()
	res := run(t, d, session, &tool.WriteArgs{FilePath: "/workspace/dir/sub/f.txt", Content: "one\ntwo\nthree\n"})
	if res.IsError || res.Output != "Wrote 14 bytes to /workspace/dir/sub/f.txt" {
		t.Fatalf("Write = %+v", res)
	}
	got, err := os.ReadFile(filepath.Join(d.Workspace(tenant, session), "dir/sub/f.txt"))
	if err != nil || string(got) != "one\ntwo\nthree\n" {
		t.Fatalf("file on the host = %q, %v", got, err)
	}

	long := strings.Repeat("x", 2500)
	writeHost(t, d, session, map[string]string{
		"empty":     "",
		"bin":       "ab\x00cd",
		"long":      long + "\nshort",
		"crlf.txt":  "a\r\nb",
		"noeol.txt": "last",
	})
	tests := []struct {
		name    string
		args    tool.ReadArgs
		want    string
		isError bool
	}{
		{"whole file", tool.ReadArgs{FilePath: "dir/sub/f.txt"}, "     1\tone\n     2\ttwo\n     3\tthree\n", false},
		{"offset and limit", tool.ReadArgs{FilePath: "/workspace/dir/sub/f.txt", Offset: 2, Limit: 1}, "     2\ttwo\n[more lines follow: read on with offset=3]\n", false},
		{"offset to the end", tool.ReadArgs{FilePath: "dir/sub/f.txt", Offset: 3}, "     3\tthree\n", false},
		{"limit reaches the end", tool.ReadArgs{FilePath: "dir/sub/f.txt", Limit: 3}, "     1\tone\n     2\ttwo\n     3\tthree\n", false},
		{"offset past the end", tool.ReadArgs{FilePath: "dir/sub/f.txt", Offset: 9}, "(/workspace/dir/sub/f.txt has 3 lines; offset 9 is past the end)", false},
		{"no final newline", tool.ReadArgs{FilePath: "noeol.txt"}, "     1\tlast\n", false},
		{"carriage returns kept", tool.ReadArgs{FilePath: "crlf.txt"}, "     1\ta\r\n     2\tb\n", false},
		{"long line cut", tool.ReadArgs{FilePath: "long"}, "     1\t" + long[:2000] + " [line truncated]\n     2\tshort\n", false},
		{"empty file", tool.ReadArgs{FilePath: "empty"}, "(/workspace/empty exists but is empty)", false},
		{"missing file", tool.ReadArgs{FilePath: "nope.txt"}, "file does not exist: /workspace/nope.txt", true},
		{"directory", tool.ReadArgs{FilePath: "/workspace/dir"}, "/workspace/dir is a directory, not a file: use Glob or Bash (ls) to list it", true},
		{"binary", tool.ReadArgs{FilePath: "bin"}, "/workspace/bin is a binary file: use Bash (for example xxd or file) to inspect it", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := run(t, d, session, &tc.args)
			if res.Output != tc.want || res.IsError != tc.isError {
				t.Errorf("Read(%+v) = %q (IsError %v), want %q (IsError %v)", tc.args, res.Output, res.IsError, tc.want, tc.isError)
			}
		})
	}
}

func TestWriteKeepsModeAndReplaces(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{})
	session := uuid.New()
	if res := bash(t, d, session, "printf 'echo old' > run.sh && chmod 755 run.sh"); res.IsError {
		t.Fatalf("setup: %+v", res)
	}
	run(t, d, session, &tool.WriteArgs{FilePath: "run.sh", Content: "echo new"})
	if res := bash(t, d, session, "./run.sh; ls -A"); res.Output != "new\nrun.sh\n" {
		t.Errorf("after Write: %q, want the new script, still executable, and no temporary files", res.Output)
	}
	if res := run(t, d, session, &tool.WriteArgs{FilePath: "/workspace", Content: "x"}); !res.IsError {
		t.Errorf("Write to the workspace root: %+v, want an error", res)
	}
}

func TestEdit(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{})
	const original = "alpha beta\nbeta gamma\ndelta\n"
	tests := []struct {
		name    string
		args    tool.EditArgs
		want    string // output
		isError bool
		content string // the file afterwards
	}{
		{"unique", tool.EditArgs{OldString: "delta", NewString: "DELTA"}, "Edited /workspace/f.txt: replaced 1 occurrence", false, "alpha beta\nbeta gamma\nDELTA\n"},
		{"multi-line", tool.EditArgs{OldString: "beta\nbeta", NewString: "b"}, "Edited /workspace/f.txt: replaced 1 occurrence", false, "alpha b gamma\ndelta\n"},
		{"not found", tool.EditArgs{OldString: "epsilon", NewString: "x"}, "old_string not found in /workspace/f.txt: read the file again and copy the text exactly, including whitespace and indentation", true, original},
		{"ambiguous", tool.EditArgs{OldString: "beta", NewString: "x"}, "old_string occurs 2 times in /workspace/f.txt: add surrounding lines to make it unique, or set replace_all to replace every occurrence", true, original},
		{"replace all", tool.EditArgs{OldString: "beta", NewString: "x", ReplaceAll: true}, "Edited /workspace/f.txt: replaced 2 occurrences", false, "alpha x\nx gamma\ndelta\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			session := uuid.New()
			writeHost(t, d, session, map[string]string{"f.txt": original})
			tc.args.FilePath = "/workspace/f.txt"
			res := run(t, d, session, &tc.args)
			if res.Output != tc.want || res.IsError != tc.isError {
				t.Errorf("Edit = %q (IsError %v), want %q (IsError %v)", res.Output, res.IsError, tc.want, tc.isError)
			}
			got, err := os.ReadFile(filepath.Join(d.Workspace(tenant, session), "f.txt"))
			if err != nil || string(got) != tc.content {
				t.Errorf("file afterwards = %q, %v; want %q", got, err, tc.content)
			}
		})
	}
	res := run(t, d, uuid.New(), &tool.EditArgs{FilePath: "missing.txt", OldString: "a", NewString: "b"})
	if want := "file does not exist: /workspace/missing.txt"; !res.IsError || res.Output != want {
		t.Errorf("Edit of a missing file = %+v, want error %q", res, want)
	}
}

func TestFileToolsRefuseEscapes(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{})
	session := uuid.New()
	// Symlinks made inside the sandbox that lead out: absolute, relative,
	// and to another session's workspace through the host path.
	other := d.Workspace(tenant, uuid.New())
	writeHost(t, d, session, map[string]string{"ok.txt": "fine"})
	cmd := fmt.Sprintf("ln -s /etc link && ln -s ../../../../../../etc rel && ln -s /etc/passwd pw && ln -s %s other", other)
	if res := bash(t, d, session, cmd); res.IsError {
		t.Fatalf("making symlinks: %+v", res)
	}
	paths := []string{"/etc/passwd", "../x", "/workspace/../etc/passwd", "/workspace/link/passwd", "/workspace/rel/passwd", "pw", "other/x"}
	for _, p := range paths {
		for _, args := range []any{
			&tool.ReadArgs{FilePath: p},
			&tool.WriteArgs{FilePath: p, Content: "pwned"},
			&tool.EditArgs{FilePath: p, OldString: "root", NewString: "pwned"},
			&tool.GlobArgs{Pattern: "*", Path: p},
			&tool.GrepArgs{Pattern: "root", Path: p},
		} {
			t.Run(fmt.Sprintf("%T %s", args, p), func(t *testing.T) {
				res := run(t, d, session, args)
				if !res.IsError {
					t.Errorf("result = %+v, want a refusal", res)
				}
				if strings.Contains(res.Output, "root:") {
					t.Errorf("output shows a host file:\n%s", res.Output)
				}
			})
		}
	}
	res := run(t, d, session, &tool.ReadArgs{FilePath: "/etc/passwd"})
	if want := "path /etc/passwd is outside /workspace"; res.Output != want {
		t.Errorf("Read /etc/passwd = %q, want %q", res.Output, want)
	}
	for _, p := range []string{"/etc/passwd", "/etc/x", other} {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), "pwned") {
			t.Errorf("%s was written through a symlink", p)
		}
	}
	// Searching the workspace does not follow the symlinks out of it.
	res = run(t, d, session, &tool.GrepArgs{Pattern: "root"})
	if res.Output != "No matches found" {
		t.Errorf("Grep over the workspace = %q, want no matches", res.Output)
	}
	res = run(t, d, session, &tool.GlobArgs{Pattern: "**/passwd"})
	if res.Output != "No files found" {
		t.Errorf("Glob over the workspace = %q, want no files", res.Output)
	}
}

// A Read of many long lines stops before it gets too big and says where to go on.
func TestReadStopsAtSizeLimit(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{})
	session := uuid.New()
	line := strings.Repeat("x", 199) + "\n"
	writeHost(t, d, session, map[string]string{"big.txt": strings.Repeat(line, 3000)})
	res := run(t, d, session, &tool.ReadArgs{FilePath: "big.txt"})
	body, note, ok := strings.Cut(res.Output, "[output stopped at 256 KiB: read on with offset=")
	if !ok || res.IsError || len(body) > readMaxBytes {
		t.Fatalf("Read of a 600 KB file: %d bytes, IsError %v, ending %q", len(res.Output), res.IsError, res.Output[max(0, len(res.Output)-80):])
	}
	lines := strings.Split(strings.TrimSuffix(body, "\n"), "\n")
	if want := fmt.Sprintf("%6d\t%s", len(lines), line[:199]); lines[len(lines)-1] != want {
		t.Errorf("last line = %.20q, want %.20q", lines[len(lines)-1], want)
	}
	if want := fmt.Sprintf("%d]\n", len(lines)+1); note != want {
		t.Errorf("after %d lines the note ends %q, want %q", len(lines), note, want)
	}
}

// A session whose calls only read gets no workspace directory: it reads
// an empty one, as a new workspace is. The first call that writes makes it.
func TestReadsMakeNoWorkspace(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{})
	session := uuid.New()
	ws := d.Workspace(tenant, session)
	for _, args := range []any{
		&tool.GlobArgs{Pattern: "*"},
		&tool.GrepArgs{Pattern: "x"},
		&tool.ReadArgs{FilePath: "/workspace/a"},
	} {
		res, err := d.Run(t.Context(), who(tenant, session), args)
		if err != nil {
			t.Fatalf("%T: %v", args, err)
		}
		if _, err := os.Stat(ws); !os.IsNotExist(err) {
			t.Fatalf("%T made the workspace (%v): %+v", args, err, res)
		}
	}
	if res, err := d.Run(t.Context(), who(tenant, session), &tool.ReadArgs{FilePath: "/workspace/a"}); err != nil || !res.IsError || !strings.Contains(res.Output, "does not exist") {
		t.Errorf("Read of a file in a workspace not made yet = %+v, %v", res, err)
	}
	if res, err := d.Run(t.Context(), who(tenant, session), &tool.WriteArgs{FilePath: "/workspace/a", Content: "x"}); err != nil || res.IsError {
		t.Fatalf("Write = %+v, %v", res, err)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "a")); err != nil || string(b) != "x" {
		t.Errorf("written file: %q, %v", b, err)
	}
	entries, err := os.ReadDir(filepath.Join(d.cfg.Dir, emptyDir))
	if err != nil || len(entries) != 0 {
		t.Errorf("the empty directory holds %v (%v)", entries, err)
	}
	res, err := d.Run(t.Context(), who(tenant, session), &tool.GlobArgs{Pattern: "*"})
	if err != nil || !strings.Contains(res.Output, "/workspace/a") {
		t.Errorf("Glob after the write = %+v, %v", res, err)
	}
}
