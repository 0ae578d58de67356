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
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/snapshot"
)

// Taking a snapshot: the workspace is walked (see scan.go), each file
// hashed unless its size and mtime are as when it was last hashed, the
// files the store lacks uploaded once the session's bounds allow them, and
// the manifest written last.

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

// capture is a directory as the store is to keep it: the entries of its
// manifest, and what must be uploaded first.
type capture struct {
	files []snapshot.File
	// keys are the hash cache's keys of the files named.
	keys []string
	// uploads are the paths of the contents the store lacks, by hash, and
	// order their hashes, as the walk found them.
	uploads map[string]string
	order   []string
	// changed counts the bytes of the files the directory's last manifest
	// in the store did not name, once per content.
	changed int64
	// size counts the bytes of its regular files, up to where the walk
	// stopped.
	size int64
}

// capture walks the directory dir within b, hashing each file unless its
// size and mtime are as when it was last hashed, and making sure the
// store keeps each content it holds already (see [snapshots.ensure]).
// Its manifest must then be written within half the blob grace of the
// call, after [snapshots.uploadAll]. A directory over one of b's bounds
// fails with an error matching errBound; c's size is then what the walk
// counted.
func (s *snapshots) capture(ctx context.Context, dir string, b bounds) (c *capture, err error) {
	c = &capture{uploads: make(map[string]string)}
	sure := make(map[string]bool)
	err = walk(dir, b, func(r *os.Root, name, rel string, info fs.FileInfo) error {
		f := snapshot.File{Path: rel, Mode: info.Mode()}
		switch {
		case info.Mode().IsRegular():
			c.size += info.Size()
			if b.bytes > 0 && c.size > b.bytes {
				return tooManyBytes(b.bytes)
			}
			key := dir + "/" + rel
			h, err := s.hash(r, name, rel, key, info)
			if err != nil {
				return err
			}
			f.Hash, f.Size = h.hash, info.Size()
			c.keys = append(c.keys, key)
			if _, ok := c.uploads[h.hash]; h.named || ok || sure[h.hash] {
				break
			}
			// Counted against the session's stored bytes whether or not
			// the store holds it already: what any tenant stored must not
			// show in what this one is told it used.
			c.changed += info.Size()
			up, err := s.ensure(ctx, h.hash)
			if err != nil {
				return err
			}
			if up {
				c.uploads[h.hash] = rel
				c.order = append(c.order, h.hash)
			} else {
				sure[h.hash] = true
			}
		case info.Mode()&fs.ModeSymlink != 0:
			var err error
			if f.Link, err = r.Readlink(name); err != nil {
				return err
			}
		case !info.IsDir():
			return nil // sockets, fifos: not kept
		}
		c.files = append(c.files, f)
		return nil
	})
	return c, err
}

// uploadAll stores the contents of dir that c found the store lacks.
func (s *snapshots) uploadAll(ctx context.Context, dir string, c *capture) error {
	if len(c.order) == 0 {
		return nil
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, hash := range c.order {
		if err := s.upload(ctx, root, c.uploads[hash], hash); err != nil {
			return err
		}
	}
	return nil
}

// take captures the workspace dir of session into the store, and returns
// the snapshot's sequence and the bytes its files hold. A workspace over
// one of lim's bounds is not captured: the error, matching errBound, says
// which and how to get under it. The caller holds the session's lock.
func (s *snapshots) take(ctx context.Context, tenant string, session uuid.UUID, dir string, lim limits) (seq uint64, size int64, err error) {
	start := time.Now()
	c, err := s.capture(ctx, dir, lim.bounds)
	size = c.size
	if errors.Is(err, errBound) {
		return 0, size, err
	}
	if err != nil {
		return 0, size, fmt.Errorf("snapshot %s: %w", session, err)
	}
	m := snapshot.Manifest{Files: c.files}
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
	adding := c.changed
	if lim.stored > 0 && used.bytes+adding > lim.stored {
		return 0, size, &boundError{fmt.Sprintf("this call left %d bytes of new or changed files, and this session's snapshots stored %d bytes since %s: over their limit of %d bytes an hour (CORRAL_SANDBOX_SNAPSHOT_BYTES), so the workspace was not snapshotted. Remove or shrink files you do not need, or change fewer before %s; the next call snapshots the workspace again",
			adding, used.bytes, used.since.UTC().Format(time.TimeOnly), lim.stored, used.since.Add(usageWindow).UTC().Format(time.TimeOnly))}
	}
	if err := s.uploadAll(ctx, dir, c); err != nil {
		return 0, size, fmt.Errorf("snapshot %s: %w", session, err)
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
		Name: snapshot.ManifestName(tenant, session),
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
	for _, k := range c.keys {
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
		info, err := s.store.GetInfo(rctx, snapshot.ManifestName(tenant, session))
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
