package upload

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
)

// A list written by hand, staged as a client could, that would write
// outside the directory, through a symlink or a file, or over itself is
// refused, saying which path, and nothing is written, in the directory or
// outside it.
func TestLayoutRefusesHostileLists(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	outside := t.TempDir()
	file := func(p string) Entry { return Entry{Path: p, Mode: 0o644, Size: 2, Hash: hashOfFull("x\n")} }
	dir := func(p string) Entry { return Entry{Path: p, Mode: fs.ModeDir | 0o755} }
	link := func(p, target string) Entry { return Entry{Path: p, Mode: fs.ModeSymlink | 0o777, Link: target} }
	// The content every file above names, staged: only the list is at
	// fault.
	s.publishChunk(t, "ada", hashOfFull("x\n"), 2, 0, []byte("x\n"))

	tests := []struct {
		name  string
		files []Entry
		want  string // in the error
	}{
		{"parent", []Entry{file("../x")}, `"../x"`},
		{"parent inside", []Entry{dir("a"), file("a/../../x")}, `"a/../../x"`},
		{"absolute", []Entry{file("/etc/x")}, `"/etc/x"`},
		{"absolute directory", []Entry{dir(outside)}, outside},
		{"through a symlink out", []Entry{link("a", outside), file("a/f")}, `"a/f" in "a", which is not a directory`},
		{"through a symlink in", []Entry{dir("d"), link("a", "d"), file("a/f")}, `"a/f" in "a", which is not a directory`},
		{"directory through a symlink", []Entry{link("a", outside), dir("a/d"), file("a/d/f")}, `"a/d" in "a"`},
		{"through a file", []Entry{file("f"), file("f/g")}, `"f/g" in "f"`},
		{"parent after", []Entry{file("d/f"), dir("d")}, `"d/f" in "d"`},
		{"twice", []Entry{file("f"), file("f")}, `"f" twice`},
		{"symlink over a file", []Entry{file("f"), link("f", outside)}, `"f" twice`},
		{"empty", []Entry{file("")}, "empty path"},
		{"dot", []Entry{dir("."), file("./f")}, "empty path"},
		{"doubled slash", []Entry{dir("d"), file("d//f")}, `"d//f"`},
		{"NUL", []Entry{file("f\x00g")}, "NUL"},
		{"device", []Entry{{Path: "dev", Mode: fs.ModeDevice | 0o666}}, `"dev" of type`},
		{"named pipe", []Entry{{Path: "p", Mode: fs.ModeNamedPipe | 0o666}}, `"p" of type`},
		{"file with no hash", []Entry{{Path: "f", Mode: 0o644, Size: 2}}, `file "f"`},
		{"symlink with no target", []Entry{link("l", "")}, `symlink "l"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ref := s.stageList(t, "ada", &List{Files: tc.files})
			laid, files, _, err := s.layout(t, "ada", ref, Bounds{})
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("layout: %d files, %v; want refused, naming %s", files, err, tc.want)
			}
			if got := describe(t, outside); len(got) != 0 {
				t.Errorf("written outside the workspace: %v", got)
			}
			if entries, _ := os.ReadDir(laid); len(entries) != 0 {
				t.Errorf("the workspace holds %d entries, want none written", len(entries))
			}
		})
	}

	// A list that is not one.
	for name, data := range map[string]string{
		"not JSON":      "not json",
		"two values":    `{"files":[]} {"files":[]}`,
		"unknown field": `{"files":[],"run":"rm -rf /"}`,
	} {
		t.Run(name, func(t *testing.T) {
			hash := hashOfFull(data)
			s.publishChunk(t, "ada", hash, int64(len(data)), 0, []byte(data))
			_, _, _, err := s.layout(t, "ada", refPrefix+hash, Bounds{})
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "is not a file list") {
				t.Errorf("layout: %v, want refused: not a file list", err)
			}
		})
	}
	for _, ref := range []string{"", "sha256:", "sha256:" + strings.Repeat("A", 64), "md5:" + strings.Repeat("0", 64), "sha256:../../x"} {
		if _, _, _, err := s.layout(t, "ada", ref, Bounds{}); !errors.Is(err, ErrRefused) {
			t.Errorf("layout of ref %q: %v, want refused", ref, err)
		}
	}
}

// A chunk staged with other content, another size, cut short or missing
// is refused, naming the file; nothing of it is kept.
func TestLayoutRefusesCorruptUploads(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	src := t.TempDir()
	big := bytes.Repeat([]byte("0123456789abcdef"), (2*bus.UploadChunkBytes+100)/16)
	writeFile(t, filepath.Join(src, "big.bin"), big, 0o644)
	writeFile(t, filepath.Join(src, "small.txt"), []byte("small\n"), 0o644)
	hash, size := hashOfFull(string(big)), int64(len(big))
	ctx := context.Background()

	tests := []struct {
		name   string
		change func(t *testing.T)
	}{
		{"other content", func(t *testing.T) {
			s.publishChunk(t, "ada", hash, size, 1, bytes.Repeat([]byte("x"), bus.UploadChunkBytes))
		}},
		{"another size said", func(t *testing.T) {
			s.publishChunk(t, "ada", hash, size+1, 0, big[:bus.UploadChunkBytes])
		}},
		{"cut short", func(t *testing.T) {
			s.publishChunk(t, "ada", hash, size, 0, big[:100])
		}},
		{"missing", func(t *testing.T) {
			if err := s.chunks.Purge(ctx, jetstream.WithPurgeSubject(bus.UploadSubject("acme", bus.UserToken("ada"), hash, 1))); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range tests {
		// One at a time: each stages the same content again first.
		t.Run(tc.name, func(t *testing.T) {
			for i := range chunkCount(size) {
				s.publishChunk(t, "ada", hash, size, i, big[i*bus.UploadChunkBytes:][:chunkLen(size, i)])
			}
			ref, _ := s.upload(t, "ada", src)
			if _, _, _, err := s.layout(t, "ada", ref, Bounds{}); err != nil {
				t.Fatalf("layout before the change: %v", err)
			}
			tc.change(t)
			laid, _, _, err := s.layout(t, "ada", ref, Bounds{})
			want := "upload of big.bin is incomplete or does not match its hash; run the command again"
			if !errors.Is(err, ErrRefused) || err.Error() != want {
				t.Errorf("layout: %v, want %q", err, want)
			}
			if data, err := os.ReadFile(filepath.Join(laid, "big.bin")); err == nil && bytes.Equal(data, big) {
				t.Errorf("big.bin laid out whole from a changed upload")
			}
		})
	}
}

// A file is never read from the snapshots' store, which every tenant's
// snapshots share: a list naming a hash whose content the user did not
// send lays out nothing, though the store holds it.
func TestLayoutNeverReadsTheStore(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "a.txt"), []byte("another tenant's secret\n"), 0o600)
	ref, _ := s.upload(t, "ada", src)
	hash := hashOfFull("another tenant's secret\n")
	ctx := context.Background()
	// In the store (another tenant's snapshot), gone from ada's uploads.
	if _, err := s.blobs.PutBytes(ctx, "b."+hash, []byte("another tenant's secret\n")); err != nil {
		t.Fatal(err)
	}
	if err := s.chunks.Purge(ctx, jetstream.WithPurgeSubject(bus.UploadSubject("acme", bus.UserToken("ada"), hash, 0))); err != nil {
		t.Fatal(err)
	}
	dir, _, _, err := s.layout(t, "ada", ref, Bounds{})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "a.txt") {
		t.Errorf("layout of a file only the store holds: %v, want refused, naming a.txt", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a.txt")); len(b) > 0 {
		t.Errorf("a.txt was laid out from the store: %q", b)
	}
}

// A file list giving a file more bytes than any upload may hold is
// refused before anything is read: sizes that would overflow a sum past
// the quota never get that far.
func TestLayoutRefusesHugeSizes(t *testing.T) {
	l := List{Files: []Entry{{Path: "a", Size: 1 << 62, Hash: hashOfFull("a")}}}
	if err := l.Check(); err == nil {
		t.Error("a file of 2^62 bytes passed the list's check")
	}
}

// A list over the bounds is refused before anything is written, saying
// what it holds and what the bound is.
func TestLayoutBounds(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	src := t.TempDir()
	for _, name := range []string{"a", "b", "c/d"} {
		writeFile(t, filepath.Join(src, name), []byte("0123456789"), 0o644)
	}
	ref, _ := s.upload(t, "ada", src)
	tests := []struct {
		b    Bounds
		want string
	}{
		{Bounds{Entries: 3}, "4 files, directories and symlinks, at most 3"},
		{Bounds{Bytes: 29}, "30 bytes, at most 29"},
	}
	for _, tc := range tests {
		dir, _, _, err := s.layout(t, "ada", ref, tc.b)
		var qe *QuotaError
		if !errors.Is(err, ErrRefused) || !errors.As(err, &qe) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("layout within %+v: %v, want over the quota: %s", tc.b, err, tc.want)
		}
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the workspace was made: %v", err)
		}
	}
	if _, files, _, err := s.layout(t, "ada", ref, Bounds{Entries: 4, Bytes: 30}); err != nil || files != 3 {
		t.Errorf("layout at the bounds: %d files, %v", files, err)
	}
}
