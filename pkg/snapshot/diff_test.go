package snapshot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	lru "github.com/hashicorp/golang-lru/v2"

	"corral.dev/pkg/event"
)

// memBlobs are contents by hash, as the store keeps them.
type memBlobs map[string][]byte

// file returns the entry of a file holding content, which m keeps.
func (m memBlobs) file(path, content string, mode fs.FileMode) File {
	sum := sha256.Sum256([]byte(content))
	h := hex.EncodeToString(sum[:])
	m[h] = []byte(content)
	return File{Path: path, Mode: mode, Hash: h, Size: int64(len(content))}
}

// counts returns an empty cache of line counts.
func counts(t *testing.T) *lru.Cache[string, event.ChangedFile] {
	t.Helper()
	c, err := lru.New[string, event.ChangedFile](16)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (m memBlobs) read(_ context.Context, hash string) ([]byte, bool, error) {
	b, ok := m[hash]
	if !ok {
		return nil, false, fmt.Errorf("no blob %s", hash)
	}
	return b, true, nil
}

// The patch of a workspace against its base is git's: git apply takes it
// and makes the workspace's files of the base's, whatever the names (a
// newline in one forges no header), modes and binary files; .git is left
// out; the stat counts lines, past its limit files alone.
func TestDiff(t *testing.T) {
	blobs := memBlobs{}
	odd := "odd\nname.txt"
	base := []File{
		{Path: ".git", Mode: fs.ModeDir | 0o755},
		blobs.file(".git/HEAD", "ref: refs/heads/main\n", 0o644),
		blobs.file("a.txt", "one\ntwo\nthree\n", 0o644),
		blobs.file("gone.txt", "bye\n", 0o644),
		blobs.file("run.sh", "#!/bin/sh\n", 0o644),
		blobs.file(odd, "x\n", 0o644),
		blobs.file("bin.dat", "\x00\x01", 0o644),
	}
	now := []File{
		{Path: ".git", Mode: fs.ModeDir | 0o755},
		blobs.file(".git/HEAD", "ref: refs/heads/other\n", 0o644),
		blobs.file("a.txt", "one\n2\nthree\nfour\n", 0o644),
		blobs.file("run.sh", "#!/bin/sh\n", 0o755),
		blobs.file(odd, "y\n", 0o644),
		blobs.file("bin.dat", "\x00\x02", 0o644),
		blobs.file("new.txt", "hello", 0o644),
	}
	changes := compare(base, now)
	var paths []string
	for _, c := range changes {
		paths = append(paths, c.Path+":"+c.status())
	}
	want := "a.txt:modified bin.dat:modified gone.txt:deleted new.txt:added odd\nname.txt:modified run.sh:modified"
	if got := strings.Join(paths, " "); got != want {
		t.Errorf("changes: %q, want %q", got, want)
	}
	stat, err := diffStat(context.Background(), blobs.read, changes, counts(t))
	if err != nil {
		t.Fatal(err)
	}
	if stat.Insertions != 4 || stat.Deletions != 3 || !stat.Files[1].Binary {
		t.Errorf("stat: %+v", stat)
	}

	var patch bytes.Buffer
	if err := writePatch(context.Background(), &patch, blobs.read, changes, 1<<20); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(patch.String(), "\ndiff --git a/name.txt") || !strings.Contains(patch.String(), `"a/odd\nname.txt"`) {
		t.Errorf("the odd name is not quoted:\n%s", patch.String())
	}
	// git apply makes the base into the workspace (binary files aside,
	// whose content a patch does not carry).
	dir := t.TempDir()
	for _, f := range base {
		if f.Mode.IsDir() || f.Path == "bin.dat" || strings.HasPrefix(f.Path, ".git") {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, f.Path), blobs[f.Hash], f.Mode.Perm()); err != nil {
			t.Fatal(err)
		}
	}
	text := patch.String()
	text = text[:strings.Index(text, "diff --git a/bin.dat")] + text[strings.Index(text, "diff --git a/gone.txt"):]
	cmd := exec.Command("git", "apply", "-")
	cmd.Dir, cmd.Stdin = dir, strings.NewReader(text)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git apply: %v\n%s\n%s", err, out, text)
	}
	for _, f := range now {
		if f.Mode.IsDir() || f.Path == "bin.dat" || strings.HasPrefix(f.Path, ".git") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, f.Path))
		if err != nil || !bytes.Equal(b, blobs[f.Hash]) {
			t.Errorf("%q after git apply: %q, %v; want %q", f.Path, b, err, blobs[f.Hash])
		}
		if info, _ := os.Stat(filepath.Join(dir, f.Path)); info != nil && info.Mode().Perm() != f.Mode.Perm() {
			t.Errorf("%q after git apply: mode %v, want %v", f.Path, info.Mode().Perm(), f.Mode.Perm())
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "gone.txt")); err == nil {
		t.Error("gone.txt is still there after git apply")
	}

	// Past the limit, files are counted, not listed.
	var many []File
	for i := range event.MaxChangedFiles + 5 {
		many = append(many, blobs.file(fmt.Sprintf("f%03d", i), fmt.Sprint(i, "\n"), 0o644))
	}
	stat, err = diffStat(context.Background(), blobs.read, compare(nil, many), counts(t))
	if err != nil || len(stat.Files) != event.MaxChangedFiles || stat.More != 5 || stat.Insertions != event.MaxChangedFiles {
		t.Errorf("a large stat: %d files, %d more, %d insertions, %v", len(stat.Files), stat.More, stat.Insertions, err)
	}
}
