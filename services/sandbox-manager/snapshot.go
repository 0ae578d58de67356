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
	// dirty are the sessions whose last snapshot failed, with the revision
	// of their placement here then: their workspace here is the only
	// up-to-date copy. dir keeps a note of each on disk,
	// <dir>/<tenant>/<session>, read back at start.
	dirty map[string]uint64
	dir   string
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
	store, err := js.ObjectStore(ctx, bus.BucketWorkspaces)
	if err != nil {
		return nil, fmt.Errorf("open object store %s: %w", bus.BucketWorkspaces, err)
	}
	stream, err := js.Stream(ctx, "OBJ_"+bus.BucketWorkspaces)
	if err != nil {
		return nil, fmt.Errorf("open the stream of object store %s: %w", bus.BucketWorkspaces, err)
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
		js:     js,
		store:  store,
		stream: stream,
		grace:  grace,
		dir:    dir,
		seq:    mustLRU[string, uint64](1 << 16),
		hashes: mustLRU[string, cachedHash](1 << 17),
		stored: mustLRU[string, time.Time](1 << 17),
		used:   mustLRU[string, usage](1 << 16),
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

// limits are what a session's snapshots hold it to; 0 is no limit.
type limits struct {
	bounds
	// stored bounds the bytes of new files a session's snapshots upload
	// within [usageWindow].
	stored int64
}

// usageWindow is the span over which [limits.stored] counts a session's
// uploads: what they uploaded longer ago is either named by its snapshot,
// counted by the workspace's own bounds, or collected by the sweep.
const usageWindow = time.Hour

// usage is what a session's snapshots uploaded since a time.
type usage struct {
	since time.Time
	bytes int64
}

// take captures the workspace dir of session into the store, and returns
// the snapshot's sequence and the bytes its files hold. A workspace over
// one of lim's bounds is not captured: the error, matching errBound, says
// which and how to get under it. The caller holds the session's lock.
func (s *snapshots) take(ctx context.Context, tenant string, session uuid.UUID, dir string, lim limits) (seq uint64, size int64, err error) {
	start := time.Now()
	var m manifest
	var keys []string // the hash cache's keys of the files named
	type upload struct {
		rel  string
		size int64
	}
	uploads := make(map[string]upload) // by hash
	var order []string
	sure := make(map[string]bool)
	err = walk(dir, lim.bounds, func(r *os.Root, name, rel string, info fs.FileInfo) error {
		f := fileEntry{Path: rel, Mode: info.Mode()}
		switch {
		case info.Mode().IsRegular():
			size += info.Size()
			if lim.bytes > 0 && size > lim.bytes {
				return tooManyBytes(lim.bytes)
			}
			key := dir + "/" + rel
			c, err := s.hash(r, name, rel, key, info)
			if err != nil {
				return err
			}
			f.Hash = c.hash
			keys = append(keys, key)
			if _, ok := uploads[c.hash]; c.named || ok || sure[c.hash] {
				break
			}
			up, err := s.ensure(ctx, c.hash)
			if err != nil {
				return err
			}
			if up {
				uploads[c.hash] = upload{rel, info.Size()}
				order = append(order, c.hash)
			} else {
				sure[c.hash] = true
			}
		case info.Mode()&fs.ModeSymlink != 0:
			var err error
			if f.Link, err = r.Readlink(name); err != nil {
				return err
			}
		case !info.IsDir():
			return nil // sockets, fifos: not kept
		}
		m.Files = append(m.Files, f)
		return nil
	})
	if errors.Is(err, errBound) {
		return 0, size, err
	}
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
			s.clean(tenant, session)
			s.mu.Unlock()
			return seq, size, nil // nothing changed since this node's last snapshot
		}
	}
	prev, _ := s.seq.Get(key)
	m.Seq = prev + 1
	s.mu.Unlock()

	used, err := s.usage(ctx, tenant, session, start)
	if err != nil {
		return 0, size, err
	}
	var adding int64
	for _, u := range uploads {
		adding += u.size
	}
	if lim.stored > 0 && used.bytes+adding > lim.stored {
		return 0, size, &boundError{fmt.Sprintf("this call left %d bytes of new or changed files, and this session's snapshots stored %d bytes since %s: over their limit of %d bytes an hour (CORRAL_SANDBOX_SNAPSHOT_BYTES), so the workspace was not snapshotted. Remove or shrink files you do not need, or change fewer before %s; the next call snapshots the workspace again",
			adding, used.bytes, used.since.UTC().Format(time.TimeOnly), lim.stored, used.since.Add(usageWindow).UTC().Format(time.TimeOnly))}
	}
	if len(order) > 0 {
		root, err := os.OpenRoot(dir)
		if err != nil {
			return 0, size, err
		}
		defer root.Close()
		for _, hash := range order {
			if err := s.upload(ctx, root, uploads[hash].rel, hash); err != nil {
				return 0, size, fmt.Errorf("snapshot %s: %w", session, err)
			}
		}
	}
	used.bytes += adding
	if time.Since(start) >= s.grace/2 {
		// The sweep may not have kept what the manifest would name.
		return 0, size, fmt.Errorf("snapshot %s: took %v, over half the blob grace period (CORRAL_SANDBOX_BLOB_GRACE); the next call tries again", session, time.Since(start).Round(time.Second))
	}
	data, err := json.Marshal(&m)
	if err != nil {
		return 0, size, err
	}
	if s.beforeManifest != nil {
		s.beforeManifest()
	}
	rctx, cancel := bus.Bound(ctx)
	defer cancel()
	_, err = s.store.Put(rctx, jetstream.ObjectMeta{
		Name: manifestName(tenant, session),
		Metadata: map[string]string{
			"seq":          strconv.FormatUint(m.Seq, 10),
			"stored_since": strconv.FormatInt(used.since.Unix(), 10),
			"stored":       strconv.FormatInt(used.bytes, 10),
		},
	}, bytes.NewReader(data))
	if err != nil {
		return 0, size, fmt.Errorf("snapshot %s: %w", session, err)
	}
	// The manifest in the store names these files now: until they
	// change, the next snapshot need not make sure the store keeps them.
	for _, k := range keys {
		if c, ok := s.hashes.Get(k); ok && !c.named {
			c.named = true
			s.hashes.Add(k, c)
		}
	}
	s.mu.Lock()
	s.seq.Add(key, m.Seq)
	s.taken.Add(key, sum)
	s.used.Add(key, used)
	s.clean(tenant, session)
	s.mu.Unlock()
	return m.Seq, size, nil
}

// usage returns what the session's snapshots uploaded in the window that
// holds now: as this node counted it, or as its last manifest says.
func (s *snapshots) usage(ctx context.Context, tenant string, session uuid.UUID, now time.Time) (usage, error) {
	key := bus.SessionKey(tenant, session)
	u, ok := s.used.Get(key)
	if !ok {
		rctx, cancel := bus.Bound(ctx)
		info, err := s.store.GetInfo(rctx, manifestName(tenant, session))
		cancel()
		switch {
		case errors.Is(err, jetstream.ErrObjectNotFound):
		case err != nil:
			return usage{}, fmt.Errorf("look up the snapshot of %s: %w", session, err)
		default:
			since, _ := strconv.ParseInt(info.Metadata["stored_since"], 10, 64)
			u.since = time.Unix(since, 0)
			u.bytes, _ = strconv.ParseInt(info.Metadata["stored"], 10, 64)
		}
	}
	if now.Sub(u.since) >= usageWindow {
		u = usage{since: now}
	}
	return u, nil
}

// hash returns the hash of file name in directory r (rel in the
// workspace, key in the cache), hashing it only if its size or mtime
// changed since it was last hashed. A sparse file is refused.
func (s *snapshots) hash(r *os.Root, name, rel, key string, info fs.FileInfo) (cachedHash, error) {
	if c, ok := s.hashes.Get(key); ok && c.size == info.Size() && c.mtime.Equal(info.ModTime()) {
		return c, nil
	}
	f, err := r.Open(name)
	if err != nil {
		return cachedHash{}, err
	}
	defer f.Close()
	n, err := holes(f, info.Size())
	if err != nil {
		return cachedHash{}, fmt.Errorf("%s: %w", rel, err)
	}
	if n > sparseSlack {
		return cachedHash{}, sparseFile(rel, info.Size(), n)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil { // holes moved it
		return cachedHash{}, fmt.Errorf("%s: %w", rel, err)
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return cachedHash{}, fmt.Errorf("%s: %w", rel, err)
	}
	c := cachedHash{size: info.Size(), mtime: info.ModTime(), hash: hex.EncodeToString(h.Sum(nil))}
	s.hashes.Add(key, c)
	return c, nil
}

// upload stores file rel of the workspace root as blob b.<hash>. A file
// that no longer has that hash (a process changed it meanwhile) is not
// kept under it: the snapshot fails, and the next one hashes it again.
func (s *snapshots) upload(ctx context.Context, root *os.Root, rel, hash string) error {
	f, err := root.Open(filepath.FromSlash(rel))
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	rctx, cancel := bus.Bound(ctx)
	defer cancel()
	if _, err := s.store.Put(rctx, jetstream.ObjectMeta{Name: "b." + hash}, io.TeeReader(f, h)); err != nil {
		return fmt.Errorf("store %s: %w", rel, err)
	}
	if hex.EncodeToString(h.Sum(nil)) != hash {
		_ = s.store.Delete(rctx, "b."+hash)
		return fmt.Errorf("%s changed while it was snapshotted", rel)
	}
	s.stored.Add(hash, time.Now())
	return nil
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
	s.taken.Remove(key) // the next call snapshots again, changed or not
	s.note(tenant, session, rev)
}

// ahead records, before a call that may change the workspace of session
// runs here at placement revision rev, that the workspace may be ahead of
// its last snapshot until the call's snapshot is taken: a node killed
// mid-call and restarted over its data keeps that workspace, with what the
// call did to it, rather than restore the older snapshot over it. Noted as
// [snapshots.failed] notes, and cleared the same way.
func (s *snapshots) ahead(tenant string, session uuid.UUID, rev uint64) {
	key := bus.SessionKey(tenant, session)
	s.mu.Lock()
	defer s.mu.Unlock()
	if have, ok := s.dirty[key]; ok && have == rev {
		return // noted already
	}
	s.note(tenant, session, rev)
}

// note notes on disk and here that the workspace of session is ahead of
// its last snapshot at placement revision rev. The caller holds s.mu.
func (s *snapshots) note(tenant string, session uuid.UUID, rev uint64) {
	s.dirty[bus.SessionKey(tenant, session)] = rev
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
	var m manifest
	if err := json.Unmarshal(data, &m); err != nil {
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
	var m manifest
	if err := json.Unmarshal(data, &m); err != nil {
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
	s.clean(tenant, session)
}
