package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
)

// tarEntry is a file of a tar as a test compares it.
type tarEntry struct {
	mode fs.FileMode
	link string
	data []byte
}

// untar reads a gzipped tar file into its entries by name.
func untar(t *testing.T, file string) map[string]tarEntry {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]tarEntry{}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimSuffix(h.Name, "/")] = tarEntry{mode: h.FileInfo().Mode(), link: h.Linkname, data: data}
	}
}

// A session's files come out with corral workspace ls, cat and get: while
// it runs, after it ended, and after its node is gone with the workspace
// on its disk, from the last snapshot, starting no sandbox.
func TestWorkspaceFilesComeOut(t *testing.T) {
	addr, data := natstest.FreeAddr(t), t.TempDir()
	hold, release := make(chan struct{}, 1), make(chan struct{})
	make5MB := "head -c 5000000 /dev/urandom > data/big.bin"
	script := steps(echoResults,
		bash("mkdir -p src/pkg data && printf 'package pkg\\n' > src/pkg/a.go && printf '#!/bin/sh\\necho built\\n' > build.sh && chmod 755 build.sh && ln -s src/pkg/a.go link.go && "+make5MB+" && echo made"),
		bash("echo waiting"),
	)
	held := func(c modeltest.Conversation) (modeltest.Turn, error) {
		if modeltest.Turns(c) == 2 {
			select {
			case hold <- struct{}{}:
			default:
			}
			<-release // the session runs while the test reads its files
		}
		return script(c)
	}
	env := map[string]string{"CORRAL_SHUTDOWN_GRACE": "200ms"}
	p, stop := startDevAt(t, addr, data, held, env)
	ran := p.runBackground(t, "acme", "make files")
	select {
	case <-hold:
	case r := <-ran:
		t.Fatalf("corral run ended before the session held: exit %d: %s", r.code, r.stderr)
	case <-time.After(60 * time.Second):
		t.Fatal("the session never held")
	}
	session := p.startedSession(t)
	s := session.String()
	dir := filepath.Join(data, "workspaces", "acme", s)
	big, err := os.ReadFile(filepath.Join(dir, "data", "big.bin"))
	if err != nil {
		t.Fatal(err)
	}

	// While it runs.
	code, stdout, stderr := p.corral(t, "workspace", s, "ls", "--tenant", "acme", "-R")
	if code != 0 {
		t.Fatalf("ls exited %d: %s", code, stderr)
	}
	var lines []string
	for line := range strings.Lines(stdout) {
		lines = append(lines, strings.Join(strings.Fields(line), " "))
	}
	wantIn(t, "ls -R", strings.Join(lines, "\n"), "-rwxr-xr-x 21 build.sh", "-rw-r--r-- 5000000 data/big.bin", "Lrwxrwxrwx - link.go -> src/pkg/a.go", "drwxr-xr-x - src/pkg")
	code, stdout, stderr = p.corral(t, "workspace", s, "cat", "/workspace/link.go", "--tenant", "acme")
	if code != 0 || stdout != "package pkg\n" {
		t.Errorf("cat link.go: exit %d, %q, %s", code, stdout, stderr)
	}
	code, stdout, _ = p.corral(t, "workspace", s, "cat", "data/big.bin", "--tenant", "acme")
	if code != 0 || stdout != string(big) {
		t.Errorf("cat data/big.bin: exit %d, %d bytes; want the file's %d", code, len(stdout), len(big))
	}
	close(release)
	if r := wait(t, ran); r.code != 0 {
		t.Fatalf("corral run exited %d: %s", r.code, r.stderr)
	}

	// After it ended: the whole workspace, and one file.
	want := map[string]tarEntry{
		"src":          {mode: fs.ModeDir | 0o755},
		"src/pkg":      {mode: fs.ModeDir | 0o755},
		"src/pkg/a.go": {mode: 0o644, data: []byte("package pkg\n")},
		"build.sh":     {mode: 0o755, data: []byte("#!/bin/sh\necho built\n")},
		"link.go":      {mode: fs.ModeSymlink | 0o777, link: "src/pkg/a.go"},
		"data":         {mode: fs.ModeDir | 0o755},
		"data/big.bin": {mode: 0o644, data: big},
	}
	get := func(t *testing.T, p *platform) {
		t.Helper()
		out := filepath.Join(t.TempDir(), "x.tar.gz")
		if code, _, stderr := p.corral(t, "workspace", s, "get", "--all", "-o", out, "--tenant", "acme"); code != 0 {
			t.Fatalf("get --all exited %d: %s", code, stderr)
		}
		got := untar(t, out)
		for name, w := range want {
			g, ok := got[name]
			if !ok || g.mode != w.mode || g.link != w.link || !bytes.Equal(g.data, w.data) {
				t.Errorf("%s in the tar: mode %v link %q %d bytes (present %v); want mode %v link %q %d bytes", name, g.mode, g.link, len(g.data), ok, w.mode, w.link, len(w.data))
			}
		}
		if len(got) != len(want) {
			t.Errorf("the tar holds %d entries, want %d", len(got), len(want))
		}
		script := filepath.Join(t.TempDir(), "build.sh")
		if code, _, stderr := p.corral(t, "workspace", s, "get", "build.sh", "-o", script, "--tenant", "acme"); code != 0 {
			t.Fatalf("get build.sh exited %d: %s", code, stderr)
		}
		if fi, err := os.Stat(script); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("get build.sh: %v, %v; want an executable file", fi, err)
		}
	}
	get(t, p)

	// Mistakes: exit 1 for what is not there, 2 for usage.
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"workspace", s, "cat", "nope", "--tenant", "acme"}, 1, "no /workspace/nope in the last snapshot"},
		{[]string{"workspace", s, "ls", "--tenant", "initech"}, 1, "no session " + s + " in tenant initech"},
		{[]string{"workspace", uuid.Must(uuid.NewV7()).String(), "ls", "--tenant", "acme"}, 1, "no session"},
		{[]string{"workspace", s, "cat", "../../etc/passwd", "--tenant", "acme"}, 2, "not a path in /workspace"},
		{[]string{"workspace", s, "get", "--all", "--tenant", "acme"}, 2, "-o FILE"},
		{[]string{"workspace", s, "rm", "x", "--tenant", "acme"}, 2, "usage"},
	} {
		code, _, stderr := p.corral(t, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("corral %s: exit %d, %q; want %d and %q", strings.Join(tc.args, " "), code, stderr, tc.code, tc.want)
		}
	}

	// Its node is gone, and the workspace with it: the files come from
	// the snapshot, and reading them brings no workspace back.
	stop()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	p2, _ := startDevAt(t, addr, data, script, env)
	get(t, p2)
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after reading its files, the session's workspace is on disk again (%v): a sandbox-manager restored it", err)
	}
}
