package sandboxmanager

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/snapshot"
)

// Snapshots: after every call that may have changed files, the session's
// workspace is captured into the object store bucket [bus.BucketWorkspaces]:
// each file's content once, named by its SHA-256 (b.<hash>), and a manifest
// of paths, modes and hashes (m.<tenant>.<session>) whose metadata carries
// the snapshot's sequence. Before a call, a node whose workspace is older
// than the last snapshot (or missing: another node ran the session, and
// died) restores it from there; the node that took the snapshot has it
// already. A node's death so loses at most the call in flight. Package
// snapshot holds the manifests' format, and reads snapshots back for the
// workspace API.

// snapshots keeps what a node knows of its sessions' snapshots.
type snapshots struct {
	js     jetstream.JetStream
	store  jetstream.ObjectStore
	stream jetstream.Stream // the store's, for what it does not offer
	// grace is how long a blob no manifest names is kept: see the sweep.
	grace time.Duration
	mu    sync.Mutex
	// seq is the sequence of the snapshot each local workspace matches,
	// by [bus.SessionKey], as every per-session entry here is.
	// The caches are bounded, the least recently used entries forgotten:
	// a session forgotten in seq restores from its own snapshot at its
	// next call, which is right, only slower; a hash or blob forgotten is
	// looked up again.
	seq *lru.Cache[string, uint64]
	// hashes caches each local file's hash by size and mtime, so that a
	// snapshot hashes only what changed.
	hashes *lru.Cache[string, cachedHash]
	// stored are the blobs known to be in the store, with when they
	// were last written (see [snapshots.ensure]).
	stored *lru.Cache[string, time.Time]
	// used is what each session's snapshots uploaded lately.
	used *lru.Cache[string, usage]
	// taken holds, for each session, the hash of the file list of the
	// snapshot this node took last: a call that changed nothing takes
	// none.
	taken *lru.Cache[string, [32]byte]
	// bases caches the base of each session (see prepare.go), nil for a
	// session that has none.
	bases *lru.Cache[string, *snapshot.Manifest]
	// counted caches the lines a change of one content to another
	// inserts and deletes: a session's next calls count again only the
	// files that changed since.
	counted *lru.Cache[string, event.ChangedFile]
	// lastChanges holds each session's changes since its base, as of its
	// last snapshot, by [bus.SessionKey].
	lastChanges *lru.Cache[string, seqChanges]
	// dirty are the sessions whose last snapshot failed, with the revision
	// of their placement here then: their workspace here is the only
	// up-to-date copy. dir keeps a note of each on disk,
	// <dir>/<tenant>/<session>, read back at start.
	dirty map[string]uint64
	// noted are the sessions with a note on disk, with the revision it
	// names. A note stays while its workspace is here, and only its last
	// byte changes as the workspace falls behind its snapshot and catches
	// up ([noteAhead], [noteClean]): a byte written in place costs a
	// microsecond, where writing a file anew and removing it cost
	// hundreds on ext4, on every call that may change the workspace.
	noted map[string]uint64
	// owed are the sessions whose note on disk still says their workspace
	// is ahead of its snapshot, which it no longer is (see
	// [snapshots.settle]).
	owed map[string]struct{}
	dir  string
	// beforeManifest, when set (in tests), runs just before a snapshot's
	// manifest is written.
	beforeManifest func()
}

type cachedHash struct {
	size  int64
	mtime time.Time
	hash  string
	// named: the manifest of the file's session in the store names
	// this hash for it, as this node wrote it.
	named bool
}

// newSnapshots returns the snapshots kept in js's object store
// [bus.BucketWorkspaces]; dir holds the notes of workspaces ahead of
// their snapshots (see [snapshots.failed]), and workspaces the
// workspaces, <tenant>/<session>, for the notes of an older version.
// Blobs no manifest names are kept for grace (see the sweep).
func newSnapshots(ctx context.Context, js jetstream.JetStream, dir, workspaces string, grace time.Duration) (*snapshots, error) {
	store, stream, err := snapshot.OpenStore(ctx, js)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := moveOldNotes(dir, workspaces); err != nil {
		return nil, err
	}
	notes, err := filepath.Glob(filepath.Join(dir, "*", "*"))
	if err != nil {
		return nil, err
	}
	dirty, noted := make(map[string]uint64), make(map[string]uint64)
	for _, p := range notes {
		tenant := filepath.Base(filepath.Dir(p))
		session, err := uuid.Parse(filepath.Base(p))
		if err != nil || event.CheckTenant(tenant) != nil {
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		rev, ahead, ok := parseNote(data)
		if !ok {
			continue
		}
		key := bus.SessionKey(tenant, session)
		noted[key] = rev
		if ahead {
			dirty[key] = rev
		}
	}
	return &snapshots{
		js:          js,
		store:       store,
		stream:      stream,
		grace:       grace,
		dir:         dir,
		seq:         mustLRU[string, uint64](1 << 16),
		hashes:      mustLRU[string, cachedHash](1 << 17),
		stored:      mustLRU[string, time.Time](1 << 17),
		used:        mustLRU[string, usage](1 << 16),
		taken:       mustLRU[string, [32]byte](1 << 16),
		bases:       mustLRU[string, *snapshot.Manifest](1 << 10),
		counted:     mustLRU[string, event.ChangedFile](1 << 14),
		lastChanges: mustLRU[string, seqChanges](1 << 10),
		dirty:       dirty,
		noted:       noted,
		owed:        make(map[string]struct{}),
	}, nil
}

// moveOldNotes moves the notes an older version kept by session alone,
// <dir>/<session>, to <dir>/<tenant>/<session>, when exactly one tenant
// has a workspace of that session here; a note that could stand for
// several tenants' workspaces (session IDs are the clients' choice) or for
// none is dropped: the session restores from its last snapshot.
func moveOldNotes(dir, workspaces string) error {
	notes, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, n := range notes {
		session, err := uuid.Parse(n.Name())
		if err != nil || n.IsDir() {
			continue
		}
		old := filepath.Join(dir, n.Name())
		owners, _ := filepath.Glob(filepath.Join(workspaces, "*", session.String()))
		if len(owners) == 1 {
			tenant := filepath.Base(filepath.Dir(owners[0]))
			if err := os.MkdirAll(filepath.Join(dir, tenant), 0o700); err != nil {
				return err
			}
			if err := os.Rename(old, filepath.Join(dir, tenant, session.String())); err != nil {
				return err
			}
			continue
		}
		if err := os.Remove(old); err != nil {
			return err
		}
	}
	return nil
}

// mustLRU returns an LRU cache of size entries; size is a constant above 0.
func mustLRU[K comparable, V any](size int) *lru.Cache[K, V] {
	c, err := lru.New[K, V](size)
	if err != nil {
		panic(err)
	}
	return c
}

// latest returns the sequence of the session's last snapshot, 0 if none,
// and when it was written (a snapshot of a workspace that did not change
// since the one before is not written again).
func (s *snapshots) latest(ctx context.Context, tenant string, session uuid.UUID) (uint64, time.Time, error) {
	rctx, cancel := bus.Bound(ctx)
	defer cancel()
	info, err := s.store.GetInfo(rctx, snapshot.ManifestName(tenant, session))
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return 0, time.Time{}, nil
	}
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("look up the snapshot of %s: %w", session, err)
	}
	seq, err := strconv.ParseUint(info.Metadata["seq"], 10, 64)
	return seq, info.ModTime, err
}

// current reports whether the local workspace matches the snapshot seq.
func (s *snapshots) current(tenant string, session uuid.UUID, seq uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	have, _ := s.seq.Get(bus.SessionKey(tenant, session))
	return have == seq
}

// failed records that a snapshot of session failed while it was placed
// here at placement revision rev: until one succeeds, the workspace here
// is the only up-to-date copy. It is noted on disk too, so that this node,
// restarted or back from a lapse of its lease, keeps that workspace rather
// than restore an older snapshot over it.
func (s *snapshots) failed(tenant string, session uuid.UUID, rev uint64) {
	key := bus.SessionKey(tenant, session)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.taken.Remove(key) // the next call snapshots again, changed or not
	s.note(tenant, session, rev)
}

// ahead records, before a call that may change the workspace of session
// runs here at placement revision rev, that the workspace may be ahead of
// its last snapshot until the call's snapshot is taken: a node killed
// mid-call and restarted over its data keeps that workspace, with what the
// call did to it, rather than restore the older snapshot over it. Noted as
// [snapshots.failed] notes, and cleared the same way. It reports whether
// the workspace was taken to match its snapshot until then: a call that
// then does not run leaves it so ([snapshots.notRun]). One that was ahead
// already, at this placement or an earlier one, stays ahead, noted at
// this one.
func (s *snapshots) ahead(tenant string, session uuid.UUID, rev uint64) (noted bool) {
	key := bus.SessionKey(tenant, session)
	s.mu.Lock()
	defer s.mu.Unlock()
	have, was := s.dirty[key]
	if was && have == rev {
		return false // noted already
	}
	s.note(tenant, session, rev)
	return !was
}

// notRun takes back [snapshots.ahead] for a call that did not run after
// all: the workspace still matches its snapshot.
func (s *snapshots) notRun(tenant string, session uuid.UUID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clean(tenant, session)
}

// A note on disk is the placement revision in decimal, a newline, and
// one byte saying whether the workspace is ahead of its last snapshot
// (noteAhead) or matches it (noteClean). A note of an older version is the
// revision alone, written only while the workspace was ahead.
const (
	noteAhead = 'A'
	noteClean = 'C'
)

// parseNote reads a note on disk: its revision and whether the workspace
// is ahead of its snapshot.
func parseNote(data []byte) (rev uint64, ahead, ok bool) {
	text, state, found := strings.Cut(string(data), "\n")
	rev, err := strconv.ParseUint(text, 10, 64)
	if err != nil {
		return 0, false, false
	}
	return rev, !found || state != string(noteClean), true
}

// note notes on disk and here that the workspace of session is ahead of
// its last snapshot at placement revision rev. The caller holds s.mu.
func (s *snapshots) note(tenant string, session uuid.UUID, rev uint64) {
	key := bus.SessionKey(tenant, session)
	s.dirty[key] = rev
	delete(s.owed, key)
	if have, ok := s.noted[key]; ok && have == rev && s.setNote(tenant, session, rev, noteAhead) {
		return
	}
	delete(s.noted, key)
	p := s.failedFile(tenant, session)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err == nil {
		if os.WriteFile(p, noteText(rev, noteAhead), 0o644) == nil {
			s.noted[key] = rev
		}
	}
}

// noteText is a note on disk: rev, a newline, and state.
func noteText(rev uint64, state byte) []byte {
	return append(strconv.AppendUint(nil, rev, 10), '\n', state)
}

// setNote writes the note of session, which names revision rev, with
// state in place: over a note of rev, which is of the same length or, as
// an older version wrote it, shorter. It reports whether it could. The
// caller holds s.mu.
func (s *snapshots) setNote(tenant string, session uuid.UUID, rev uint64, state byte) bool {
	f, err := os.OpenFile(s.failedFile(tenant, session), os.O_WRONLY, 0)
	if err != nil {
		return false
	}
	_, err = f.WriteAt(noteText(rev, state), 0)
	return errors.Join(err, f.Close()) == nil
}

// failedAt returns the placement revision at which the last snapshot of
// session taken here failed, if it did.
func (s *snapshots) failedAt(tenant string, session uuid.UUID) (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rev, ok := s.dirty[bus.SessionKey(tenant, session)]
	return rev, ok
}

// clean notes that the workspace here matches a snapshot. The note on disk
// is left saying it is ahead until [snapshots.settle]: a call's result
// need not wait for it, and a node restarted meanwhile only keeps a
// workspace that matches its snapshot, and snapshots it again. The caller
// holds s.mu.
func (s *snapshots) clean(tenant string, session uuid.UUID) {
	key := bus.SessionKey(tenant, session)
	if _, ok := s.dirty[key]; !ok {
		return
	}
	delete(s.dirty, key)
	if _, ok := s.noted[key]; ok {
		s.owed[key] = struct{}{}
		return
	}
	s.unnote(tenant, session)
}

// settle writes down on disk that the workspace of session matches its
// snapshot, if it does and its note still says otherwise (see
// [snapshots.clean]).
func (s *snapshots) settle(tenant string, session uuid.UUID) {
	key := bus.SessionKey(tenant, session)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.owed[key]; !ok {
		return
	}
	delete(s.owed, key)
	if _, ahead := s.dirty[key]; ahead {
		return
	}
	if rev, ok := s.noted[key]; !ok || !s.setNote(tenant, session, rev, noteClean) {
		s.unnote(tenant, session)
	}
}

// unnote removes the note of session on disk: its workspace here is gone.
// The caller holds s.mu.
func (s *snapshots) unnote(tenant string, session uuid.UUID) {
	key := bus.SessionKey(tenant, session)
	delete(s.dirty, key)
	delete(s.noted, key)
	delete(s.owed, key)
	_ = os.Remove(s.failedFile(tenant, session))
}

// failedFile is the note of a session's failed snapshot, per tenant: one
// tenant's session ID may be another's.
func (s *snapshots) failedFile(tenant string, session uuid.UUID) string {
	return filepath.Join(s.dir, tenant, session.String())
}

// isDirty reports whether the last snapshot of session failed.
func (s *snapshots) isDirty(tenant string, session uuid.UUID) bool {
	_, failed := s.failedAt(tenant, session)
	return failed
}

// known reports whether the node knows which snapshot the local
// workspace matches.
func (s *snapshots) known(tenant string, session uuid.UUID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seq.Contains(bus.SessionKey(tenant, session))
}

// restore replaces the workspace dir with the session's last snapshot.
func (s *snapshots) restore(ctx context.Context, tenant string, session uuid.UUID, dir string) (uint64, error) {
	data, err := s.store.GetBytes(ctx, snapshot.ManifestName(tenant, session))
	if err != nil {
		return 0, fmt.Errorf("restore %s: %w", session, err)
	}
	m, err := snapshot.DecodeManifest(data)
	if err != nil {
		return 0, fmt.Errorf("restore %s: %w", session, err)
	}
	// Until it is whole, the workspace here matches no snapshot.
	key := bus.SessionKey(tenant, session)
	s.forget(key)
	if err := os.RemoveAll(dir); err != nil {
		return 0, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	if err := s.layOut(ctx, dir, m.Files); err != nil {
		return 0, fmt.Errorf("restore %s: %w", session, err)
	}
	files, err := json.Marshal(m.Files)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	s.seq.Add(key, m.Seq)
	s.taken.Add(key, sha256.Sum256(files))
	s.clean(tenant, session)
	s.mu.Unlock()
	return m.Seq, nil
}

// layOut makes files, a manifest's, in the directory dir, which exists
// and is empty, fetching each file's content from the store.
func (s *snapshots) layOut(ctx context.Context, dir string, files []snapshot.File) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, f := range files {
		p := filepath.FromSlash(f.Path)
		switch {
		case f.Mode.IsDir():
			err = root.MkdirAll(p, f.Mode.Perm())
		case f.Link != "":
			err = root.Symlink(f.Link, p)
		default:
			err = s.fetch(ctx, root, p, f)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", f.Path, err)
		}
	}
	return nil
}

func (s *snapshots) fetch(ctx context.Context, root *os.Root, p string, f snapshot.File) error {
	obj, err := s.store.Get(ctx, "b."+f.Hash)
	if err != nil {
		return err
	}
	defer obj.Close()
	out, err := root.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, f.Mode.Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, obj); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// fork makes the last snapshot of session from the first of session to,
// both of tenant, and returns its sequence: 0 if from has none. The files
// are shared, not copied.
func (s *snapshots) fork(ctx context.Context, tenant string, from, to uuid.UUID) (uint64, error) {
	rctx, cancel := bus.Bound(ctx)
	defer cancel()
	data, err := s.store.GetBytes(rctx, snapshot.ManifestName(tenant, from))
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("fork %s: %w", from, err)
	}
	m, err := snapshot.DecodeManifest(data)
	if err != nil {
		return 0, fmt.Errorf("fork %s: %w", from, err)
	}
	m.Seq = 1
	if data, err = json.Marshal(&m); err != nil {
		return 0, err
	}
	_, err = s.store.Put(rctx, jetstream.ObjectMeta{
		Name:     snapshot.ManifestName(tenant, to),
		Metadata: map[string]string{"seq": "1", "fork": from.String()},
	}, bytes.NewReader(data))
	if err != nil {
		return 0, fmt.Errorf("fork %s: %w", from, err)
	}
	return 1, nil
}

// mark records that the local workspace of session matches snapshot seq
// (0: none was taken).
func (s *snapshots) mark(tenant string, session uuid.UUID, seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq.Add(bus.SessionKey(tenant, session), seq)
}

// drop deletes a session's snapshot manifest. The files it names stay:
// other snapshots may name them too.
func (s *snapshots) drop(ctx context.Context, tenant string, session uuid.UUID) {
	rctx, cancel := bus.Bound(ctx)
	defer cancel()
	_ = s.store.Delete(rctx, snapshot.ManifestName(tenant, session))
	_ = s.store.Delete(rctx, snapshot.BaseName(tenant, session))
	s.mu.Lock()
	s.clean(tenant, session)
	s.mu.Unlock()
}

// forget drops what the node knows of the session whose
// [bus.SessionKey] is key: its workspace is gone, or may be out of date.
func (s *snapshots) forget(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq.Remove(key)
	s.taken.Remove(key)
	s.used.Remove(key)
}

// gone forgets a session whose workspace here was removed, and the note of
// its failed snapshot, if any, which stood for that workspace. (A session
// merely placed afresh is forgotten but keeps its note: see
// [snapshots.failed].)
func (s *snapshots) gone(tenant string, session uuid.UUID) {
	s.forget(bus.SessionKey(tenant, session))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unnote(tenant, session)
}
