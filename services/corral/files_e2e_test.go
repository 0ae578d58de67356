package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
)

// A session started with --dir: the folder's files are uploaded, laid
// out in /workspace before the model's first turn, modes and symlinks
// kept, and the model works on them. The same folder uploaded again sends
// nothing. A batch job's "dir", relative to the batch file, starts its
// session the same way; another user cannot start from what one user
// uploaded.
func TestSessionStartsFromUploadedFiles(t *testing.T) {
	look := "cd /workspace && ./run.sh && stat -c '%a %n' run.sh secret/key && readlink link dangling && sha256sum data/big.bin && ls -A"
	p := startDev(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
		if !strings.Contains(c.Messages[0].Text, "look at the files") {
			return modeltest.Turn{Text: "nothing to do"}, nil
		}
		if modeltest.Turns(c) == 0 {
			return modeltest.Turn{Calls: []modeltest.Call{bash(look)}}, nil
		}
		return modeltest.Turn{Text: "seen: " + modeltest.Results(c)[0].Content}, nil
	}, nil)

	jobs := t.TempDir()
	src := filepath.Join(jobs, "project")
	big := make([]byte, 700_000) // two chunks
	_, _ = rand.NewChaCha8([32]byte{7}).Read(big)
	for name, f := range map[string]struct {
		data []byte
		perm os.FileMode
	}{
		"main.py":      {[]byte("print('hi')\n"), 0o644},
		"run.sh":       {[]byte("#!/bin/sh\necho ran-the-script\n"), 0o755},
		"secret/key":   {[]byte("private\n"), 0o600},
		"data/big.bin": {big, 0o644},
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(src, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, name), f.data, f.perm); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(src, name), f.perm); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"link": "run.sh", "dangling": "no/such/file"} {
		if err := os.Symlink(target, filepath.Join(src, link)); err != nil {
			t.Fatal(err)
		}
	}
	// And a few thousand more, of several modes, nested.
	for i := range 3000 {
		name := filepath.Join(src, "many", fmt.Sprintf("d%02d", i%40), fmt.Sprintf("f%04d.txt", i))
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			t.Fatal(err)
		}
		perm := []os.FileMode{0o644, 0o600, 0o755}[i%3]
		if err := os.WriteFile(name, []byte(strings.Repeat(fmt.Sprint(i), i%7)), perm); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(name, perm); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../d00/f0000.txt", filepath.Join(src, "many", "d01", "up")); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(big)

	code, stdout, stderr := p.corral(t, "run", "--tenant", "acme", "--user", "ada", "--dir", src, "look at the files")
	if code != 0 {
		t.Fatalf("corral run --dir exited %d:\n%s", code, stderr)
	}
	wantIn(t, "what the upload said", stderr, "uploaded "+src+": 3,004 files, ")
	wantIn(t, "the answer", stdout, "ran-the-script", "755 run.sh", "600 secret/key", "run.sh\nno/such/file",
		hex.EncodeToString(sum[:]), "dangling\ndata\nlink\nmain.py\nmany\nrun.sh\nsecret")
	session := sessionOf(t, stderr)
	var requested *event.SessionRequested
	for _, ev := range p.events(t, session) {
		if r, ok := ev.(*event.SessionRequested); ok {
			requested = r
		}
	}
	if requested == nil || !strings.HasPrefix(requested.Files, "sha256:") {
		t.Fatalf("the session's request = %+v, want it to name the upload", requested)
	}
	// Laid out exactly: every entry, with its mode, size and link, as
	// the workspace's snapshot lists them.
	var want []string
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil || path == src {
			return err
		}
		info, err := os.Lstat(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		size, name := "-", rel
		if info.Mode().IsRegular() {
			size = fmt.Sprint(info.Size())
		}
		if info.Mode()&os.ModeSymlink != 0 {
			target, _ := os.Readlink(path)
			name += " -> " + target
		}
		want = append(want, fmt.Sprintf("%s %s %s", info.Mode(), size, name))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(p.corralOK(t, "workspace", session.String(), "ls", "-R", "--tenant", "acme", "--user", "ada")), "\n") {
		got = append(got, strings.Join(strings.Fields(line), " "))
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("the workspace holds %d entries, the folder %d; first differences: %v", len(got), len(want), firstDiff(got, want))
	}

	code, _, stderr = p.corral(t, "run", "--tenant", "acme", "--user", "ada", "--dir", src, "look at the files")
	if code != 0 {
		t.Fatalf("corral run --dir again exited %d:\n%s", code, stderr)
	}
	wantIn(t, "what the second upload said", stderr, "uploaded "+src+": 3,004 files, ", "(0 files, 0 B sent)")

	code, _, stderr = p.corral(t, "run", "--tenant", "acme", "--user", "ada", "--dir", src, "--session", session.String(), "again")
	if code != 2 || !strings.Contains(stderr, "cannot go with --session") {
		t.Errorf("--dir with --session: exit %d: %s", code, stderr)
	}

	file := filepath.Join(jobs, "jobs.jsonl")
	if err := os.WriteFile(file, []byte(`{"id": "files-1", "prompt": "look at the files", "dir": "project"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := p.corral(t, "batch", "submit", "--tenant", "acme", "--user", "bob", file); code != 0 {
		t.Fatalf("batch submit exited %d:\n%s", code, stderr)
	}
	results := p.corralOK(t, "batch", "results", "--tenant", "acme", "--user", "bob", file)
	wantIn(t, "the batch's results", results, `"status":"completed"`, "ran-the-script", hex.EncodeToString(sum[:]))

	// carol names ada's upload in a request of her own.
	nc, err := p.connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	theft := uuid.Must(uuid.NewV7())
	req := event.Request{Header: event.NewHeader(event.TypeRequest, "acme", theft), User: "carol", Prompt: "look at the files", Files: requested.Files}
	if err := bus.Publish(context.Background(), js, bus.RequestSubject("acme", theft, "carol"), req.ID.String(), &req); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		for _, ev := range p.events(t, theft) {
			if f, ok := ev.(*event.SessionFailed); ok {
				if f.Code != event.CodeWorkspace || !strings.Contains(f.Reason, "is not uploaded") {
					t.Errorf("carol's session failed with %s: %s; want %s: not uploaded", f.Code, f.Reason, event.CodeWorkspace)
				}
				return nil
			}
			if _, ok := ev.(*event.SessionCompleted); ok {
				t.Fatal("carol's session completed from ada's upload")
			}
		}
		return fmt.Errorf("carol's session has not ended")
	})
}

// firstDiff returns the first few lines in one of a and b, sorted, but not
// the other.
func firstDiff(a, b []string) []string {
	var out []string
	for _, s := range a {
		if !slices.Contains(b, s) && len(out) < 5 {
			out = append(out, "+"+s)
		}
	}
	for _, s := range b {
		if !slices.Contains(a, s) && len(out) < 10 {
			out = append(out, "-"+s)
		}
	}
	return out
}
