package upload

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/natstest"
)

// store is a server with Corral's streams, as the sandbox-manager reads
// it.
type store struct {
	js     jetstream.JetStream
	chunks jetstream.Stream
	blobs  jetstream.ObjectStore
}

func newStore(t *testing.T) *store {
	t.Helper()
	_, _, js := natstest.Run(t)
	ctx := context.Background()
	chunks, err := js.Stream(ctx, bus.StreamUploads)
	if err != nil {
		t.Fatal(err)
	}
	blobs, err := js.ObjectStore(ctx, bus.BucketWorkspaces)
	if err != nil {
		t.Fatal(err)
	}
	return &store{js: js, chunks: chunks, blobs: blobs}
}

// layout lays ref, staged by user of acme, out in a fresh directory, and
// returns it.
func (s *store) layout(t *testing.T, user, ref string, b Bounds) (dir string, files int, bytes int64, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir = filepath.Join(t.TempDir(), "workspace")
	files, bytes, err = Layout(ctx, s.chunks, "acme", user, ref, dir, b)
	return dir, files, bytes, err
}

// upload uploads path as user of acme.
func (s *store) upload(t *testing.T, user, path string) (string, Stats) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ref, st, err := Upload(ctx, s.js, "acme", user, path)
	if err != nil {
		t.Fatalf("upload %s: %v", path, err)
	}
	return ref, st
}

// writeFile writes data to name with exactly mode perm (the umask
// aside).
func writeFile(t *testing.T, name string, data []byte, perm fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(name, perm); err != nil {
		t.Fatal(err)
	}
}

// bigSize is the size of the tree's file of more than one chunk: two
// whole chunks and a part.
const bigSize = 2*bus.UploadChunkBytes + 12345

// makeTree makes a tree of 60 files in each of dirs directories (and a
// few more) under a new directory and returns it: nested directories of
// modes 0755, 0750, 0700 and 0555, files of modes 0755, 0644, 0600 and
// 0444, empty files, files of the same content, a file of several chunks,
// and symlinks to a file, to a directory, to nothing and out of the tree.
func makeTree(t *testing.T, dirs int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "project")
	modes := []fs.FileMode{0o755, 0o644, 0o600}
	for d := range max(dirs, 4) {
		for f := range 60 {
			name := filepath.Join(dir, fmt.Sprintf("pkg%02d", d), fmt.Sprintf("file%02d.txt", f))
			if f%10 == 9 {
				name = filepath.Join(dir, fmt.Sprintf("pkg%02d", d), "nested", "deeper", fmt.Sprintf("file%02d.go", f))
			}
			data := fmt.Appendf(nil, "package %d\n// file %d\n", d, f)
			switch {
			case f%15 == 0:
				data = nil // empty
			case f%7 == 0:
				data = []byte("the same content in many files\n")
			}
			writeFile(t, name, data, modes[(d+f)%len(modes)])
		}
	}
	big := make([]byte, bigSize)
	r := rand.NewChaCha8([32]byte{1})
	_, _ = r.Read(big)
	writeFile(t, filepath.Join(dir, "data", "big.bin"), big, 0o644)
	writeFile(t, filepath.Join(dir, "bin", "run.sh"), []byte("#!/bin/sh\necho run\n"), 0o755)
	writeFile(t, filepath.Join(dir, "secret", "key"), []byte("private\n"), 0o600)
	writeFile(t, filepath.Join(dir, "readonly", "notes.md"), []byte("read me\n"), 0o444)
	if err := os.MkdirAll(filepath.Join(dir, "empty", "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{
		"link-to-file":         "bin/run.sh",
		"pkg00/link-to-dir":    "../pkg01",
		"pkg00/nested/up":      "..",
		"dangling":             "no/such/file",
		"outside":              "/etc/passwd",
		"pkg01/nested/to-data": "../../data/big.bin",
	} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	for name, perm := range map[string]fs.FileMode{"secret": 0o700, "readonly": 0o555, "pkg03": 0o750} {
		if err := os.Chmod(filepath.Join(dir, name), perm); err != nil {
			t.Fatal(err)
		}
	}
	// A read-only directory's files stay removable for the test's
	// cleanup once it is made writable again.
	t.Cleanup(func() { _ = os.Chmod(filepath.Join(dir, "readonly"), 0o755) })
	return dir
}

// describe returns every entry under dir, by slash-separated path: its
// type and mode, and a file's hash or a symlink's target. Symlinks are
// not followed.
func describe(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := make(map[string]string)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		desc := info.Mode().String()
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc = "symlink -> " + target
		case info.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(data)
			desc += fmt.Sprintf(" %d bytes %s", len(data), hex.EncodeToString(sum[:8]))
		}
		out[filepath.ToSlash(rel)] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sameTree fails the test unless got and want describe the same tree.
func sameTree(t *testing.T, got, want map[string]string) {
	t.Helper()
	for p, w := range want {
		if g, ok := got[p]; !ok {
			t.Errorf("%s: missing, want %s", p, w)
		} else if g != w {
			t.Errorf("%s: %s, want %s", p, g, w)
		}
	}
	for p, g := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("%s: %s, not in the upload", p, g)
		}
	}
}

// publishChunk stages data as chunk i of the content hash of size bytes,
// for user of acme, as any client could: with no message ID, so that it
// replaces whatever was staged there.
func (s *store) publishChunk(t *testing.T, user, hash string, size int64, i int, data []byte) {
	t.Helper()
	msg := nats.NewMsg(bus.UploadSubject("acme", bus.UserToken(user), hash, i))
	msg.Data = data
	msg.Header.Set(sizeHeader, strconv.FormatInt(size, 10))
	if _, err := s.js.PublishMsg(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
}

// stageList stages l as user of acme, by hand, and returns its ref.
func (s *store) stageList(t *testing.T, user string, l *List) string {
	t.Helper()
	ref, data, err := l.Ref()
	if err != nil {
		t.Fatal(err)
	}
	hash, _ := ParseRef(ref)
	for i := range chunkCount(int64(len(data))) {
		s.publishChunk(t, user, hash, int64(len(data)), i, data[i*bus.UploadChunkBytes:][:chunkLen(int64(len(data)), i)])
	}
	return ref
}

// hashOfFull is the SHA-256 of s in hex, and hashOf its first 8 bytes,
// as [describe] shows it.
func hashOfFull(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func hashOf(s string) string { return hashOfFull(s)[:16] }
