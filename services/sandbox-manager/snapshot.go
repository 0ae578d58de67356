package sandboxmanager

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
)

// Snapshots: after every call that may have changed files, the session's
// workspace is captured into the object store bucket [bus.BucketWorkspaces]:
// each file's content once, named by its SHA-256 (b.<hash>), and a manifest
// of paths, modes and hashes (m.<tenant>.<session>) whose metadata carries
// the snapshot's sequence. Before a call, a node whose workspace is older
// than the last snapshot (or missing: another node ran the session, and
// died) restores it from there; the node that took the snapshot has it
// already. A node's death so loses at most the call in flight.

// manifest lists a workspace's files.
type manifest struct {
	Seq   uint64      `json:"seq"`
	Files []fileEntry `json:"files"`
}

type fileEntry struct {
	Path string      `json:"path"` // relative, slash-separated
	Mode fs.FileMode `json:"mode"`
	Hash string      `json:"hash,omitempty"` // regular files
	Link string      `json:"link,omitempty"` // symlinks: the target
}

// snapshots keeps what a node knows of its sessions' snapshots.
type snapshots struct {
	store jetstream.ObjectStore
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
	// stored are the blobs known to be in the store.
	stored *lru.Cache[string, struct{}]
	// taken holds, for each session, the hash of the file list of the
	// snapshot this node took last: a call that changed nothing takes
	// none.
	taken *lru.Cache[string, [32]byte]
	// dirty are the sessions whose last snapshot failed, with the revision
	// of their placement here then: their workspace here is the only
	// up-to-date copy. dir keeps a note of each on disk,
	// <dir>/<tenant>/<session>, read back at start.
	dirty map[string]uint64
	dir   string
}

type cachedHash struct {
	size  int64
	mtime time.Time
	hash  string
}

// newSnapshots returns the snapshots kept in store; dir holds the notes of
// snapshots that failed (see [snapshots.failed]), and workspaces the
// workspaces, <tenant>/<session>, for the notes of an older version.
func newSnapshots(store jetstream.ObjectStore, dir, workspaces string) (*snapshots, error) {
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
	dirty := make(map[string]uint64)
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
		if rev, err := strconv.ParseUint(string(data), 10, 64); err == nil {
			dirty[bus.SessionKey(tenant, session)] = rev
		}
	}
	return &snapshots{
		store:  store,
		dir:    dir,
		seq:    mustLRU[string, uint64](1 << 16),
		hashes: mustLRU[string, cachedHash](1 << 17),
		stored: mustLRU[string, struct{}](1 << 17),
		taken:  mustLRU[string, [32]byte](1 << 16),
		dirty:  dirty,
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

func manifestName(tenant string, session uuid.UUID) string {
	return "m." + tenant + "." + session.String()
}

// take captures the workspace dir of session into the store, and returns
// the snapshot's sequence and the bytes its files hold. The caller holds
// the session's lock.
func (s *snapshots) take(ctx context.Context, tenant string, session uuid.UUID, dir string) (seq uint64, size int64, err error) {
	var m manifest
	err = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := e.Info()
		if err != nil {
			return err
		}
		f := fileEntry{Path: filepath.ToSlash(rel), Mode: info.Mode()}
		switch {
		case info.Mode().IsRegular():
			size += info.Size()
			if f.Hash, err = s.put(ctx, p, info); err != nil {
				return err
			}
		case info.Mode()&fs.ModeSymlink != 0:
			if f.Link, err = os.Readlink(p); err != nil {
				return err
			}
		case !info.IsDir():
			return nil // sockets, fifos: not kept
		}
		m.Files = append(m.Files, f)
		return nil
	})
	if err != nil {
		return 0, size, fmt.Errorf("snapshot %s: %w", session, err)
	}
	files, err := json.Marshal(m.Files)
	if err != nil {
		return 0, size, err
	}
	sum := sha256.Sum256(files)
	key := bus.SessionKey(tenant, session)
	s.mu.Lock()
	if last, ok := s.taken.Get(key); ok && last == sum {
		if seq, _ := s.seq.Get(key); seq > 0 {
			s.mu.Unlock()
			return seq, size, nil // nothing changed since this node's last snapshot
		}
	}
	prev, _ := s.seq.Get(key)
	m.Seq = prev + 1
	s.mu.Unlock()
	data, err := json.Marshal(&m)
	if err != nil {
		return 0, size, err
	}
	rctx, cancel := bus.Bound(ctx)
	defer cancel()
	_, err = s.store.Put(rctx, jetstream.ObjectMeta{
		Name:     manifestName(tenant, session),
		Metadata: map[string]string{"seq": strconv.FormatUint(m.Seq, 10)},
	}, bytes.NewReader(data))
	if err != nil {
		return 0, size, fmt.Errorf("snapshot %s: %w", session, err)
	}
	s.mu.Lock()
	s.seq.Add(key, m.Seq)
	s.taken.Add(key, sum)
	s.clean(tenant, session)
	s.mu.Unlock()
	return m.Seq, size, nil
}

// put stores the content of file p, unless the store has it, and returns
// its hash. A hash is only ever cached beside the file's size and mtime;
// whether the store holds it is known apart, so that a file whose upload
// failed is uploaded at the next snapshot.
func (s *snapshots) put(ctx context.Context, p string, info fs.FileInfo) (string, error) {
	c, ok := s.hashes.Get(p)
	var f *os.File
	if !ok || c.size != info.Size() || !c.mtime.Equal(info.ModTime()) {
		var err error
		if f, err = os.Open(p); err != nil {
			return "", err
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return "", err
		}
		c = cachedHash{size: info.Size(), mtime: info.ModTime(), hash: hex.EncodeToString(h.Sum(nil))}
		s.hashes.Add(p, c)
	}
	if s.stored.Contains(c.hash) {
		return c.hash, nil
	}
	rctx, cancel := bus.Bound(ctx)
	defer cancel()
	_, err := s.store.GetInfo(rctx, "b."+c.hash)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		if f == nil {
			if f, err = os.Open(p); err != nil {
				return "", err
			}
			defer f.Close()
		} else if _, err := f.Seek(0, io.SeekStart); err != nil {
			return "", err
		}
		// A cached hash stands for the file while its size and mtime
		// are the same, as everywhere here.
		_, err = s.store.Put(rctx, jetstream.ObjectMeta{Name: "b." + c.hash}, f)
	}
	if err != nil {
		return "", fmt.Errorf("store %s: %w", p, err)
	}
	s.stored.Add(c.hash, struct{}{})
	return c.hash, nil
}

// latest returns the sequence of the session's last snapshot; 0 if none.
func (s *snapshots) latest(ctx context.Context, tenant string, session uuid.UUID) (uint64, error) {
	rctx, cancel := bus.Bound(ctx)
	defer cancel()
	info, err := s.store.GetInfo(rctx, manifestName(tenant, session))
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("look up the snapshot of %s: %w", session, err)
	}
	return strconv.ParseUint(info.Metadata["seq"], 10, 64)
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
	s.dirty[key] = rev
	s.taken.Remove(key) // the next call snapshots again, changed or not
	p := s.failedFile(tenant, session)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err == nil {
		_ = os.WriteFile(p, []byte(strconv.FormatUint(rev, 10)), 0o644)
	}
}

// failedAt returns the placement revision at which the last snapshot of
// session taken here failed, if it did.
func (s *snapshots) failedAt(tenant string, session uuid.UUID) (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rev, ok := s.dirty[bus.SessionKey(tenant, session)]
	return rev, ok
}

// clean notes that the workspace here matches a snapshot. The caller holds
// s.mu.
func (s *snapshots) clean(tenant string, session uuid.UUID) {
	key := bus.SessionKey(tenant, session)
	if _, ok := s.dirty[key]; ok {
		delete(s.dirty, key)
		_ = os.Remove(s.failedFile(tenant, session))
	}
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
	data, err := s.store.GetBytes(ctx, manifestName(tenant, session))
	if err != nil {
		return 0, fmt.Errorf("restore %s: %w", session, err)
	}
	m, err := decodeManifest(data)
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
	root, err := os.OpenRoot(dir)
	if err != nil {
		return 0, err
	}
	defer root.Close()
	for _, f := range m.Files {
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
			return 0, fmt.Errorf("restore %s: %s: %w", session, f.Path, err)
		}
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

func (s *snapshots) fetch(ctx context.Context, root *os.Root, p string, f fileEntry) error {
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
	data, err := s.store.GetBytes(rctx, manifestName(tenant, from))
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("fork %s: %w", from, err)
	}
	m, err := decodeManifest(data)
	if err != nil {
		return 0, fmt.Errorf("fork %s: %w", from, err)
	}
	m.Seq = 1
	if data, err = json.Marshal(&m); err != nil {
		return 0, err
	}
	_, err = s.store.Put(rctx, jetstream.ObjectMeta{
		Name:     manifestName(tenant, to),
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
	_ = s.store.Delete(rctx, manifestName(tenant, session))
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
}

// gone forgets a session whose workspace here was removed, and the note of
// its failed snapshot, if any, which stood for that workspace. (A session
// merely placed afresh is forgotten but keeps its note: see
// [snapshots.failed].)
func (s *snapshots) gone(tenant string, session uuid.UUID) {
	s.forget(bus.SessionKey(tenant, session))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clean(tenant, session)
}
