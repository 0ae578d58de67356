package upload

import (
	"archive/tar"
	"archive/zip"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
)

// A folder of a few thousand files is laid out exactly as it was: paths,
// modes, contents and symlinks' targets. Uploaded again, nothing is sent.
func TestUploadAndLayout(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	src := makeTree(t, 40)
	want := describe(t, src)

	ref, st := s.upload(t, "ada", src)
	if !strings.HasPrefix(ref, "sha256:") {
		t.Errorf("ref = %q, want sha256:<hex>", ref)
	}
	var files int
	for _, d := range want {
		if strings.HasPrefix(d, "-") {
			files++
		}
	}
	if st.Files != files || st.Bytes < bigSize || st.Blobs < 10 || st.Sent < bigSize {
		t.Errorf("stats = %+v, want %d files, all but the empty and repeated ones sent", st, files)
	}
	dir, gotFiles, gotBytes, err := s.layout(t, "ada", ref, Bounds{})
	if err != nil {
		t.Fatalf("layout: %v", err)
	}
	t.Cleanup(func() { _ = os.Chmod(filepath.Join(dir, "readonly"), 0o755) })
	sameTree(t, describe(t, dir), want)
	if gotFiles != files || gotBytes != st.Bytes {
		t.Errorf("layout wrote %d files, %d bytes; want %d, %d", gotFiles, gotBytes, files, st.Bytes)
	}

	again, st2 := s.upload(t, "ada", src)
	if again != ref || st2.Blobs != 0 || st2.Sent != 0 {
		t.Errorf("uploaded again: %s, %+v; want %s and nothing sent", again, st2, ref)
	}

	// Laid out again over what a first try left.
	ctx := context.Background()
	if err := os.WriteFile(filepath.Join(dir, "left-over"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Layout(ctx, s.chunks, "acme", "ada", ref, dir, Bounds{}); err != nil {
		t.Fatalf("layout again: %v", err)
	}
	sameTree(t, describe(t, dir), want)
}

// Another user of the tenant, and a user of another tenant, cannot lay
// out what one user uploaded: it is staged under that user alone.
func TestUploadIsTheUsers(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "a.txt"), []byte("ada's\n"), 0o644)
	ref, _ := s.upload(t, "ada", src)

	_, _, _, err := s.layout(t, "bob", ref, Bounds{})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "is not uploaded") {
		t.Errorf("bob's layout of ada's upload: %v, want refused: not uploaded", err)
	}
	_, _, err = Layout(context.Background(), s.chunks, "initech", "ada", ref, t.TempDir(), Bounds{})
	if !errors.Is(err, ErrRefused) {
		t.Errorf("initech's layout of acme's upload: %v, want refused", err)
	}
	// bob uploading the same files stages his own copy.
	if _, st := s.upload(t, "bob", src); st.Blobs != 1 {
		t.Errorf("bob's upload of the same files sent %d contents, want 1", st.Blobs)
	}
	if _, _, _, err := s.layout(t, "bob", ref, Bounds{}); err != nil {
		t.Errorf("bob's layout of his own upload: %v", err)
	}
}

// A chunk's subject is no secret: a client of another tenant, or another
// user, that publishes first, on a subject of its own, a message whose ID
// is a chunk's subject (or anything else the uploader could work out)
// drops none of the upload's chunks: it is laid out whole.
func TestUploadNotDroppedByAnothersMessageID(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "a.txt"), []byte("ada's\n"), 0o644)
	big := make([]byte, bus.UploadChunkBytes+10)
	writeFile(t, filepath.Join(src, "big.bin"), big, 0o644)
	want := describe(t, src)
	tr, err := openTree(src)
	if err != nil {
		t.Fatal(err)
	}
	ref, data, err := tr.list.Ref()
	tr.close()
	if err != nil {
		t.Fatal(err)
	}
	listHash, _ := ParseRef(ref)
	contents := map[string]int64{listHash: int64(len(data)), hashOfFull("ada's\n"): 6}
	sum := sha256.Sum256(big)
	contents[hex.EncodeToString(sum[:])] = int64(len(big))
	ctx := context.Background()
	for _, who := range []struct{ tenant, user string }{{"globex", "eve"}, {"acme", "bob"}} {
		own := bus.UploadSubject(who.tenant, bus.UserToken(who.user), hashOfFull(who.tenant+who.user), 0)
		for hash, size := range contents {
			for i := range chunkCount(size) {
				id := bus.UploadSubject("acme", bus.UserToken("ada"), hash, i)
				if _, err := s.js.Publish(ctx, own, []byte("not ada's"), jetstream.WithMsgID(id)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}

	got, _ := s.upload(t, "ada", src)
	if got != ref {
		t.Fatalf("ref = %s, want %s", got, ref)
	}
	dir, _, _, err := s.layout(t, "ada", ref, Bounds{})
	if err != nil {
		t.Fatalf("layout: %v", err)
	}
	sameTree(t, describe(t, dir), want)
}

// Archives are uploaded as the folder they hold: a tar, tar.gz or zip
// of the tree lists exactly what the folder does, so that, the folder
// uploaded first, they send nothing; and a tree laid out from them (sent
// from the archive by another user) is the folder.
func TestUploadArchives(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	src := makeTree(t, 4)
	want := describe(t, src)
	ref, _ := s.upload(t, "ada", src)
	dir := t.TempDir()
	for _, name := range []string{"tree.tar", "tree.tar.gz", "tree.tgz", "tree.zip"} {
		t.Run(name, func(t *testing.T) {
			archive := filepath.Join(dir, name)
			writeArchive(t, src, archive)
			got, st := s.upload(t, "ada", archive)
			if got != ref || st.Blobs != 0 {
				t.Errorf("ref %s, %+v; want the folder's, %s, and nothing sent", got, st, ref)
			}
			user := "user of " + name
			if got, st = s.upload(t, user, archive); got != ref || st.Blobs < 10 {
				t.Errorf("%s's upload: ref %s, %+v; want the folder's, %s, and its files sent", user, got, st, ref)
			}
			laid, _, _, err := s.layout(t, user, got, Bounds{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.Chmod(filepath.Join(laid, "readonly"), 0o755) })
			sameTree(t, describe(t, laid), want)
		})
	}
}

// An archive's directories need not be listed: those its files are in are
// made, 0755.
func TestUploadArchiveImplicitDirectories(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	archive := filepath.Join(t.TempDir(), "a.tar.gz")
	f, err := os.Create(archive)
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	tw := tar.NewWriter(zw)
	for name, body := range map[string]string{"./a/b/c.txt": "c\n", "a/d.txt": "d\n"} {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o640, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, body); err != nil {
			t.Fatal(err)
		}
	}
	if err := errors.Join(tw.Close(), zw.Close(), f.Close()); err != nil {
		t.Fatal(err)
	}
	ref, _ := s.upload(t, "ada", archive)
	dir, files, _, err := s.layout(t, "ada", ref, Bounds{})
	if err != nil || files != 2 {
		t.Fatalf("layout: %d files, %v", files, err)
	}
	sameTree(t, describe(t, dir), map[string]string{
		"a":         "drwxr-xr-x",
		"a/b":       "drwxr-xr-x",
		"a/b/c.txt": "-rw-r----- 2 bytes " + hashOf("c\n"),
		"a/d.txt":   "-rw-r----- 2 bytes " + hashOf("d\n"),
	})
}

// What is not a directory, a regular file or a symlink is refused, named.
func TestUploadRefusesSpecialFiles(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "ok.txt"), []byte("ok"), 0o644)
	if err := syscall.Mkfifo(filepath.Join(src, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A socket's path is short: bound in a directory of its own.
	sockDir, err := os.MkdirTemp("", "sock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	l, err := net.Listen("unix", filepath.Join(sockDir, "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := os.Symlink(sockDir, filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	_, _, err = Upload(context.Background(), s.js, "acme", "ada", src)
	if err == nil || !strings.Contains(err.Error(), "pipe (a named pipe)") {
		t.Errorf("upload of a folder with a named pipe: %v, want an error naming it", err)
	}
	// The socket is reached through a symlink, which is not followed.
	if err := os.Remove(filepath.Join(src, "pipe")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Upload(context.Background(), s.js, "acme", "ada", src); err != nil {
		t.Errorf("upload with a symlink to a socket's directory: %v", err)
	}
	if err := os.Rename(filepath.Join(sockDir, "s"), filepath.Join(src, "sock")); err != nil {
		t.Fatal(err)
	}
	_, _, err = Upload(context.Background(), s.js, "acme", "ada", src)
	if err == nil || !strings.Contains(err.Error(), "sock (a socket)") {
		t.Errorf("upload of a folder with a socket: %v, want an error naming it", err)
	}
}

// A content whose reader does not give what was hashed is never staged
// whole: its last chunk, which says it is, is not sent.
func TestUploadChangedContent(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	want := strings.Repeat("a", bus.UploadChunkBytes+10)
	hash := hashOfFull(want)
	u := &uploader{js: s.js, tenant: "acme", user: bus.UserToken("ada"), slots: make(chan struct{}, inFlight)}
	changed := strings.Repeat("b", bus.UploadChunkBytes) + strings.Repeat("a", 10)
	for name, body := range map[string]string{"changed": changed, "shorter": want[:100], "longer": want + "x"} {
		err := u.send(context.Background(), hash, int64(len(want)), strings.NewReader(body))
		if !errors.Is(err, errChanged) {
			t.Errorf("%s: send = %v, want %v", name, err, errChanged)
		}
	}
	staged, err := u.staged(context.Background(), hash, int64(len(want)))
	if err != nil || staged {
		t.Errorf("staged = %v, %v; want not", staged, err)
	}
	if _, err := s.chunks.GetLastMsgForSubject(context.Background(), bus.UploadSubject("acme", bus.UserToken("ada"), hash, 1)); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("last chunk: %v, want none", err)
	}
}

// writeArchive writes the tree at src to name, an archive of the kind its
// name says, with every directory listed.
func writeArchive(t *testing.T, src, name string) {
	t.Helper()
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	walk := func(fn func(rel string, info fs.FileInfo, link string)) {
		err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
			if err != nil || p == src {
				return err
			}
			rel, _ := filepath.Rel(src, p)
			info, err := d.Info()
			if err != nil {
				return err
			}
			link := ""
			if info.Mode()&fs.ModeSymlink != 0 {
				link, _ = os.Readlink(p)
			}
			fn(filepath.ToSlash(rel), info, link)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if strings.HasSuffix(name, ".zip") {
		zw := zip.NewWriter(f)
		walk(func(rel string, info fs.FileInfo, link string) {
			h, err := zip.FileInfoHeader(info)
			if err != nil {
				t.Fatal(err)
			}
			h.Name = rel
			if info.IsDir() {
				h.Name += "/"
			}
			w, err := zw.CreateHeader(h)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case link != "":
				_, err = io.WriteString(w, link)
			case info.Mode().IsRegular():
				var data []byte
				data, err = os.ReadFile(filepath.Join(src, rel))
				if err == nil {
					_, err = w.Write(data)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
		})
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		return
	}
	var w io.Writer = f
	var zw *gzip.Writer
	if !strings.HasSuffix(name, ".tar") {
		zw = gzip.NewWriter(f)
		w = zw
	}
	tw := tar.NewWriter(w)
	walk(func(rel string, info fs.FileInfo, link string) {
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			t.Fatal(err)
		}
		h.Name = "./" + rel
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if info.Mode().IsRegular() {
			data, err := os.ReadFile(filepath.Join(src, rel))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tw.Write(data); err != nil {
				t.Fatal(err)
			}
		}
	})
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
