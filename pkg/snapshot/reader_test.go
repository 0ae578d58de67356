package snapshot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/event"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/sessionlog"
	"corral.dev/pkg/workspaceapi"
)

// testStore is a server's snapshot store, written here as the
// sandbox-manager writes it.
type testStore struct {
	js    jetstream.JetStream
	store jetstream.ObjectStore
}

func newTestStore(t *testing.T) *testStore {
	t.Helper()
	_, _, js := natstest.Run(t)
	store, _, err := OpenStore(context.Background(), js)
	if err != nil {
		t.Fatal(err)
	}
	return &testStore{js: js, store: store}
}

// file stores content as a blob and returns its entry.
func (s *testStore) file(t *testing.T, path, content string, mode fs.FileMode) File {
	t.Helper()
	sum := sha256.Sum256([]byte(content))
	h := hex.EncodeToString(sum[:])
	if _, err := s.store.PutString(context.Background(), "b."+h, content); err != nil {
		t.Fatal(err)
	}
	return File{Path: path, Mode: mode, Hash: h, Size: int64(len(content))}
}

// put stores m under name, as snapshot seq.
func (s *testStore) put(t *testing.T, name string, m Manifest) {
	t.Helper()
	data, err := json.Marshal(&m)
	if err != nil {
		t.Fatal(err)
	}
	meta := jetstream.ObjectMeta{Name: name, Metadata: map[string]string{"seq": strconv.FormatUint(m.Seq, 10)}}
	if _, err := s.store.Put(context.Background(), meta, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
}

// session records the start of a new session of tenant, and returns it.
func (s *testStore) session(t *testing.T, tenant string) uuid.UUID {
	t.Helper()
	session := uuid.Must(uuid.NewV7())
	ev := &event.SessionRequested{Header: event.NewHeader(event.TypeSessionRequested, tenant, session), Request: uuid.Must(uuid.NewV7()), User: "ada", Model: "openai:gpt-test", Prompt: "hi"}
	if err := sessionlog.New(s.js, sessionlog.Options{As: sessionlog.Harness, Reader: "test"}).Record(context.Background(), ev, ev.ID.String()); err != nil {
		t.Fatal(err)
	}
	return session
}

func (s *testStore) reader(t *testing.T) *Reader {
	t.Helper()
	r, err := NewReader(context.Background(), s.js, sessionlog.New(s.js, sessionlog.Options{Reader: "test"}))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// codeOf returns the API's code of err, "" if it is none of the API's
// answers.
func codeOf(err error) string {
	var ae *workspaceapi.Error
	if errors.As(err, &ae) {
		return ae.Code
	}
	return ""
}

// A Reader lists, reads and diffs the last snapshot of a session from the
// store alone; what the API refuses is a *workspaceapi.Error with its
// code, told apart from a failure of the store.
func TestReader(t *testing.T) {
	s := newTestStore(t)
	ctx := context.Background()
	big := make([]byte, 300_001) // three of the store's chunks
	for i := range big {
		big[i] = byte(rand.N(256))
	}
	session := s.session(t, "acme")
	base := []File{
		{Path: "src", Mode: fs.ModeDir | 0o755},
		s.file(t, "src/a.txt", "one\ntwo\n", 0o644),
		s.file(t, "gone.txt", "bye\n", 0o644),
	}
	s.put(t, BaseName("acme", session), Manifest{Seq: 1, Files: base})
	now := []File{
		{Path: "src", Mode: fs.ModeDir | 0o755},
		{Path: "src/deep", Mode: fs.ModeDir | 0o755},
		s.file(t, "src/a.txt", "one\n2\n", 0o644),
		s.file(t, "src/deep/b.txt", "hi\n", 0o644),
		{Path: "link", Mode: fs.ModeSymlink | 0o777, Link: "src/deep/b.txt"},
		s.file(t, "big", string(big), 0o644),
	}
	s.put(t, ManifestName("acme", session), Manifest{Seq: 3, Files: now})
	r := s.reader(t)

	t.Run("list", func(t *testing.T) {
		all, err := r.List(ctx, "acme", &workspaceapi.ListRequest{Session: session, Recursive: true})
		if err != nil {
			t.Fatal(err)
		}
		if all.Seq != 3 || len(all.Entries) != len(now) {
			t.Fatalf("ls -R = %+v, want snapshot 3's %d entries", all, len(now))
		}
		for i, f := range now {
			want := workspaceapi.Entry{Path: f.Path, Mode: f.Mode, Size: f.Size, SHA256: f.Hash, Link: f.Link}
			if all.Entries[i] != want {
				t.Errorf("entry %d = %+v, want %+v", i, all.Entries[i], want)
			}
		}
		top, err := r.List(ctx, "acme", &workspaceapi.ListRequest{Session: session, Path: "/workspace/src"})
		if err != nil || len(top.Entries) != 2 || top.Entries[0].Path != "src/deep" || top.Entries[1].Path != "src/a.txt" {
			t.Errorf("ls /workspace/src = %+v, %v; want src/deep and src/a.txt", top, err)
		}
	})

	t.Run("read", func(t *testing.T) {
		got, err := r.Read(ctx, "acme", &workspaceapi.ReadRequest{Session: session, Path: "link"})
		if err != nil || string(got.Data) != "hi\n" || got.Entry.Path != "src/deep/b.txt" {
			t.Errorf("cat link = %+v, %v; want the file it links to", got, err)
		}
		// No length: the whole file, up to MaxRead.
		got, err = r.Read(ctx, "acme", &workspaceapi.ReadRequest{Session: session, Path: "big"})
		if err != nil || !bytes.Equal(got.Data, big) {
			t.Errorf("cat big: %d bytes, %v; want its %d", len(got.Data), err, len(big))
		}
		// In pieces of an odd length, each from the last one's cursor.
		req := workspaceapi.ReadRequest{Session: session, Path: "big", Length: 70_001}
		var out []byte
		for len(out) < len(big) {
			got, err := r.Read(ctx, "acme", &req)
			if err != nil || len(got.Data) == 0 {
				t.Fatalf("cat big at %d: %d bytes, %v", req.Offset, len(got.Data), err)
			}
			out = append(out, got.Data...)
			req.Offset, req.Seq, req.Cursor = int64(len(out)), got.Seq, got.Next
		}
		if !bytes.Equal(out, big) {
			t.Errorf("big read in pieces differs")
		}
	})

	t.Run("diff", func(t *testing.T) {
		d, err := r.Diff(ctx, "acme", &workspaceapi.DiffRequest{Session: session}, 0)
		if err != nil {
			t.Fatal(err)
		}
		var files []string
		for _, f := range d.Changes.Files {
			files = append(files, f.Path+":"+f.Status)
		}
		if got, want := strings.Join(files, " "), "big:added gone.txt:deleted link:added src/a.txt:modified src/deep/b.txt:added"; got != want || d.Seq != 3 || d.Truncated {
			t.Errorf("diff: %s (snapshot %d, truncated %v), want %s", got, d.Seq, d.Truncated, want)
		}
		if !strings.Contains(d.Patch, "diff --git a/src/a.txt b/src/a.txt\n") || !strings.Contains(d.Patch, "-two\n+2\n") {
			t.Errorf("patch:\n%s", d.Patch)
		}
		stat, err := r.Diff(ctx, "acme", &workspaceapi.DiffRequest{Session: session, Stat: true}, 0)
		if err != nil || stat.Patch != "" || stat.Changes.Insertions != d.Changes.Insertions {
			t.Errorf("diff --stat = %+v, %v; want the counts alone", stat, err)
		}
		cut, err := r.Diff(ctx, "acme", &workspaceapi.DiffRequest{Session: session}, 100)
		if err != nil || !cut.Truncated || len(cut.Patch) != 100 || !strings.HasPrefix(d.Patch, cut.Patch) {
			t.Errorf("diff cut at 100 bytes: %d bytes, truncated %v, %v", len(cut.Patch), cut.Truncated, err)
		}
	})

	// An empty file's size is known without asking the store (a
	// workspace of many costs no round trip each).
	t.Run("empty file", func(t *testing.T) {
		empty := s.session(t, "acme")
		s.put(t, ManifestName("acme", empty), Manifest{Seq: 2, Files: []File{{Path: "empty", Mode: 0o644, Hash: emptyHash}}})
		got, err := r.List(ctx, "acme", &workspaceapi.ListRequest{Session: empty})
		if err != nil || len(got.Entries) != 1 || got.Entries[0].Size != 0 {
			t.Errorf("ls of a workspace with an empty file, its blob not in the store: %+v, %v", got, err)
		}
	})

	// A manifest of an older version names no sizes: they come from the
	// store.
	t.Run("old manifest", func(t *testing.T) {
		old := s.session(t, "acme")
		files := make([]File, len(now))
		copy(files, now)
		for i := range files {
			files[i].Size = 0
		}
		s.put(t, ManifestName("acme", old), Manifest{Seq: 1, Files: files})
		got, err := r.List(ctx, "acme", &workspaceapi.ListRequest{Session: old, Path: "big"})
		if err != nil || len(got.Entries) != 1 || got.Entries[0].Size != int64(len(big)) {
			t.Errorf("ls big of an old manifest = %+v, %v; want its size %d", got, err, len(big))
		}
	})

	t.Run("refused", func(t *testing.T) {
		unsaved := s.session(t, "acme")
		bare := s.session(t, "acme")
		s.put(t, ManifestName("acme", bare), Manifest{Seq: 1, Files: now})
		tests := []struct {
			name, tenant string
			do           func(tenant string) error
			code, want   string
		}{
			{"dot-dot", "acme", read(r, session, "../../etc/passwd", 0), workspaceapi.CodeBadRequest, "no .. element"},
			{"absolute", "acme", list(r, session, "/etc"), workspaceapi.CodeBadRequest, "not a path in /workspace"},
			{"directory", "acme", read(r, session, "src", 0), workspaceapi.CodeBadRequest, "is a directory"},
			{"missing", "acme", read(r, session, "nope", 0), workspaceapi.CodeNotFound, "no /workspace/nope in the last snapshot"},
			{"another tenant", "initech", list(r, session, ""), workspaceapi.CodeNotFound, "no session " + session.String() + " in tenant initech"},
			{"no snapshot yet", "acme", list(r, unsaved, ""), workspaceapi.CodeNotFound, "no snapshot of session " + unsaved.String() + " yet"},
			{"snapshot changed", "acme", read(r, session, "big", 99), workspaceapi.CodeChanged, "snapshotted again"},
			{"no base", "acme", func(tenant string) error {
				_, err := r.Diff(ctx, tenant, &workspaceapi.DiffRequest{Session: bare}, 0)
				return err
			}, workspaceapi.CodeNotFound, "nothing to compare its workspace with"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				err := tc.do(tc.tenant)
				if codeOf(err) != tc.code || err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("got %v (code %q), want code %s and ...%s...", err, codeOf(err), tc.code, tc.want)
				}
			})
		}
	})

	// A blob the store lost is the store's failure, none of the API's
	// answers.
	t.Run("lost blob", func(t *testing.T) {
		lost := s.session(t, "acme")
		f := File{Path: "lost", Mode: 0o644, Hash: strings.Repeat("ab", 32), Size: 1}
		s.put(t, ManifestName("acme", lost), Manifest{Seq: 1, Files: []File{f}})
		_, err := r.Read(ctx, "acme", &workspaceapi.ReadRequest{Session: lost, Path: "lost"})
		if err == nil || codeOf(err) != "" {
			t.Errorf("cat of a lost blob: %v (code %q), want a failure with no code", err, codeOf(err))
		}
	})
}

// list returns a call of r.List of p in session's snapshot.
func list(r *Reader, session uuid.UUID, p string) func(string) error {
	return func(tenant string) error {
		_, err := r.List(context.Background(), tenant, &workspaceapi.ListRequest{Session: session, Path: p})
		return err
	}
}

// read returns a call of r.Read of p in session's snapshot seq (0: the
// last).
func read(r *Reader, session uuid.UUID, p string, seq uint64) func(string) error {
	return func(tenant string) error {
		_, err := r.Read(context.Background(), tenant, &workspaceapi.ReadRequest{Session: session, Path: p, Seq: seq})
		return err
	}
}
