package sandboxmanager

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/natstest"
)

// workspaceOf fills a directory with files of size bytes each, total bytes
// in all, random so that none is stored twice.
func workspaceOf(tb testing.TB, total, size int) string {
	tb.Helper()
	dir := tb.TempDir()
	buf := make([]byte, size)
	for i := 0; i*size < total; i++ {
		rand.Read(buf)
		sub := filepath.Join(dir, fmt.Sprintf("d%d", i%10))
		os.MkdirAll(sub, 0o755)
		if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%d", i)), buf, 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	return dir
}

func newTestSnapshots(tb testing.TB) *snapshots {
	tb.Helper()
	_, _, js := natstest.Run(tb)
	snaps, err := newSnapshots(context.Background(), js, tb.TempDir(), tb.TempDir(), time.Hour)
	if err != nil {
		tb.Fatal(err)
	}
	return snaps
}

// BenchmarkSnapshotCallChanges measures the snapshot after a call that
// changed three files of a 1 MB workspace of 100 files: what follows every
// Bash call.
func BenchmarkSnapshotCallChanges(b *testing.B) {
	s := newTestSnapshots(b)
	dir := workspaceOf(b, 1<<20, 10<<10)
	session := uuid.New()
	ctx := context.Background()
	if _, _, err := s.take(ctx, "bench", session, dir, limits{}); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 10<<10)
	var ds []time.Duration
	for b.Loop() {
		b.StopTimer()
		for j := range 3 {
			rand.Read(buf)
			os.WriteFile(filepath.Join(dir, fmt.Sprintf("d%d", j), fmt.Sprintf("f%d", j)), buf, 0o644)
		}
		b.StartTimer()
		start := time.Now()
		if _, _, err := s.take(ctx, "bench", session, dir, limits{}); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2])/float64(time.Millisecond), "p50-ms")
	b.ReportMetric(float64(ds[min(len(ds)-1, len(ds)*99/100)])/float64(time.Millisecond), "p99-ms")
}

func benchFull(b *testing.B, total int, restore bool) {
	s := newTestSnapshots(b)
	dir := workspaceOf(b, total, 64<<10)
	ctx := context.Background()
	session := uuid.New()
	if restore {
		if _, _, err := s.take(ctx, "bench", session, dir, limits{}); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(total))
	b.ResetTimer()
	for range b.N {
		if restore {
			s.forget(bus.SessionKey("bench", session))
			if _, err := s.restore(ctx, "bench", session, filepath.Join(b.TempDir(), "w")); err != nil {
				b.Fatal(err)
			}
			continue
		}
		// A first snapshot: every file is new to the store.
		b.StopTimer()
		s = newTestSnapshots(b)
		b.StartTimer()
		if _, _, err := s.take(ctx, "bench", uuid.New(), dir, limits{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSnapshot1MB(b *testing.B)   { benchFull(b, 1<<20, false) }
func BenchmarkSnapshot100MB(b *testing.B) { benchFull(b, 100<<20, false) }
func BenchmarkRestore1MB(b *testing.B)    { benchFull(b, 1<<20, true) }
func BenchmarkRestore100MB(b *testing.B)  { benchFull(b, 100<<20, true) }

// A snapshot restores to the same files, modes and links, and a file
// already stored is not stored again.
func TestSnapshotRoundTrip(t *testing.T) {
	s := newTestSnapshots(t)
	dir := workspaceOf(t, 64<<10, 8<<10)
	os.WriteFile(filepath.Join(dir, "run.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755)
	os.WriteFile(filepath.Join(dir, "copy"), []byte("same"), 0o644)
	os.WriteFile(filepath.Join(dir, "d1", "copy"), []byte("same"), 0o644)
	os.Symlink("run.sh", filepath.Join(dir, "link"))
	os.Mkdir(filepath.Join(dir, "empty"), 0o700)
	ctx := context.Background()
	session := uuid.New()
	seq, _, err := s.take(ctx, "acme", session, dir, limits{})
	if err != nil || seq != 1 {
		t.Fatalf("take: %d, %v", seq, err)
	}
	other, err := newSnapshots(ctx, s.js, t.TempDir(), t.TempDir(), time.Hour) // another node
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "w")
	if _, err := other.restore(ctx, "acme", session, out); err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		a, _ := os.Lstat(p)
		b, err := os.Lstat(filepath.Join(out, rel))
		if err != nil {
			t.Errorf("%s: not restored: %v", rel, err)
			return nil
		}
		if a.Mode() != b.Mode() && rel != "." {
			t.Errorf("%s: mode %v, want %v", rel, b.Mode(), a.Mode())
		}
		if a.Mode().IsRegular() {
			x, _ := os.ReadFile(p)
			y, _ := os.ReadFile(filepath.Join(out, rel))
			if string(x) != string(y) {
				t.Errorf("%s: content differs", rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := os.Readlink(filepath.Join(out, "link")); l != "run.sh" {
		t.Errorf("link = %q", l)
	}
	// "copy" twice: one blob; every blob once.
	names := map[string]int{}
	lister, err := s.store.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range lister {
		names[o.Name]++
	}
	files := 0
	filepath.WalkDir(dir, func(_ string, e os.DirEntry, _ error) error {
		if e.Type().IsRegular() {
			files++
		}
		return nil
	})
	if blobs := len(names) - 1; blobs != files-1 {
		t.Errorf("%d blobs for %d files of which two are the same", blobs, files)
	}
	if !other.current("acme", session, seq) {
		t.Error("the restoring node does not know it is current")
	}
}

// A file whose upload failed is uploaded at the next snapshot, though its
// hash is cached: no manifest names a file the store does not hold.
func TestSnapshotUploadsWhatAFailedUploadLeftOut(t *testing.T) {
	s := newTestSnapshots(t)
	ctx := context.Background()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("only here\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	session := uuid.New()
	if _, _, err := s.take(ctx, "acme", session, dir, limits{}); err != nil {
		t.Fatal(err)
	}
	// As after an upload that failed (the server died under it): the hash
	// is cached, the store does not have the file, the snapshot failed.
	sum := sha256.Sum256([]byte("only here\n"))
	hash := hex.EncodeToString(sum[:])
	if err := s.store.Delete(ctx, "b."+hash); err != nil {
		t.Fatal(err)
	}
	s.stored.Remove(hash)
	c, _ := s.hashes.Get(dir + "/f")
	c.named = false // no manifest in the store names it
	s.hashes.Add(dir+"/f", c)
	s.failed("acme", session, 1)

	if _, _, err := s.take(ctx, "acme", session, dir, limits{}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "w")
	again, err := newSnapshots(ctx, s.js, t.TempDir(), t.TempDir(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := again.restore(ctx, "acme", session, out); err != nil {
		t.Fatalf("restore on another node: %v", err)
	}
	if data, err := os.ReadFile(filepath.Join(out, "f")); err != nil || string(data) != "only here\n" {
		t.Errorf("restored f = %q, %v", data, err)
	}
}
