package sandboxmanager

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/snapshot"
)

// The sweep collects the blobs (b.<hash>) no manifest names: what calls
// overwrote or removed, and what the snapshots of sessions since dropped
// held. Every node sweeps, with its reaper; sweeps may overlap.
//
// A blob is collected only when no manifest named it as the sweep listed
// them (at time R) and its last write is older than R - grace. A snapshot
// being written meanwhile names either blobs its session's manifest
// already names (kept by that manifest until the new one, which names
// them too, replaces it), or blobs it made sure of: uploaded, or seen
// written within grace/2, or rewritten (touched) now. It writes its
// manifest within grace/2 of that, or fails. So a blob it names was
// written after R - grace unless its manifest was written before R, and
// seen by the sweep. The sweep's delete and a snapshot's touch are each
// conditional on the blob's last write (a compare-and-set on the meta
// message's sequence), so one of them loses: a touch that loses uploads
// the blob afresh, a delete that loses leaves it. Clocks of the nodes
// and the server are taken to agree within a small part of grace.

// blobMeta returns the info of object name in the store and the sequence
// and time of its last write; jetstream.ErrObjectNotFound if it is
// missing or deleted.
func (s *snapshots) blobMeta(ctx context.Context, name string) (*jetstream.ObjectInfo, uint64, time.Time, error) {
	m, err := s.stream.GetLastMsgForSubject(ctx, s.metaSubject(name))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, 0, time.Time{}, jetstream.ErrObjectNotFound
	}
	if err != nil {
		return nil, 0, time.Time{}, err
	}
	var info jetstream.ObjectInfo
	if err := json.Unmarshal(m.Data, &info); err != nil {
		return nil, 0, time.Time{}, fmt.Errorf("object %s: bad meta: %w", name, err)
	}
	if info.Deleted {
		return nil, 0, time.Time{}, jetstream.ErrObjectNotFound
	}
	return &info, m.Sequence, m.Time, nil
}

// rewriteMeta writes info again as the meta of its object, if its last
// write is still the one at seq: a touch, or with info.Deleted a delete
// (whose chunks the caller purges). A lost race returns an error for
// which [bus.Conflict] holds.
func (s *snapshots) rewriteMeta(ctx context.Context, info *jetstream.ObjectInfo, seq uint64) error {
	info.ModTime = time.Time{}
	data, err := json.Marshal(info)
	if err != nil {
		return err
	}
	msg := nats.NewMsg(s.metaSubject(info.Name))
	msg.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	msg.Data = data
	_, err = s.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(seq))
	return err
}

func (s *snapshots) metaSubject(name string) string {
	return "$O." + bus.BucketWorkspaces + ".M." + base64.URLEncoding.EncodeToString([]byte(name))
}

// ensure makes sure the store holds blob b.<hash> and will keep it while a
// manifest naming it is written (see the sweep above); it reports whether
// the blob must be uploaded instead.
func (s *snapshots) ensure(ctx context.Context, hash string) (upload bool, err error) {
	seen, ok := s.stored.Get(hash)
	if ok && time.Since(seen) < s.grace/2 {
		return false, nil
	}
	rctx, cancel := bus.Bound(ctx)
	defer cancel()
	info, seq, at, err := s.blobMeta(rctx, "b."+hash)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up blob %s: %w", hash, err)
	}
	if time.Since(at) >= s.grace/2 {
		// Old enough that a sweep may be about to collect it.
		if err := s.rewriteMeta(rctx, info, seq); bus.Conflict(err) {
			return true, nil // changed meanwhile, or deleted: upload it
		} else if err != nil {
			return false, fmt.Errorf("touch blob %s: %w", hash, err)
		}
		at = time.Now()
	}
	s.stored.Add(hash, at)
	return false, nil
}

// sweep collects the blobs no manifest names that were last written more
// than grace ago, and returns how many it collected. A manifest it cannot
// read stops it before it deletes anything.
func (s *snapshots) sweep(ctx context.Context) (int, error) {
	start := time.Now()
	objs, err := s.store.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("list %s: %w", bus.BucketWorkspaces, err)
	}
	named := make(map[string]bool)
	var blobs []string
	for _, o := range objs {
		switch {
		case strings.HasPrefix(o.Name, "b."):
			blobs = append(blobs, strings.TrimPrefix(o.Name, "b."))
		default:
			// Every other object is a manifest: a session's snapshot
			// (m.), the workspace it was prepared with (p.), an
			// environment's layer (e.).
			rctx, cancel := bus.Bound(ctx)
			data, err := s.store.GetBytes(rctx, o.Name)
			cancel()
			if errors.Is(err, jetstream.ErrObjectNotFound) {
				continue // dropped meanwhile
			}
			if err != nil {
				return 0, fmt.Errorf("read %s: %w", o.Name, err)
			}
			var m snapshot.Manifest
			if err := json.Unmarshal(data, &m); err != nil {
				return 0, fmt.Errorf("read %s: %w", o.Name, err)
			}
			for _, f := range m.Files {
				if f.Hash != "" {
					named[f.Hash] = true
				}
			}
		}
	}
	n := 0
	for _, hash := range blobs {
		if named[hash] || ctx.Err() != nil {
			continue
		}
		collected, err := s.collect(ctx, hash, start.Add(-s.grace))
		if err != nil {
			return n, err
		}
		if collected {
			n++
		}
	}
	return n, ctx.Err()
}

// collect deletes blob b.<hash> if it was last written before cutoff and
// nothing wrote it since it was looked at.
func (s *snapshots) collect(ctx context.Context, hash string, cutoff time.Time) (bool, error) {
	rctx, cancel := bus.Bound(ctx)
	defer cancel()
	info, seq, at, err := s.blobMeta(rctx, "b."+hash)
	if errors.Is(err, jetstream.ErrObjectNotFound) || err == nil && !at.Before(cutoff) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up blob %s: %w", hash, err)
	}
	nuid := info.NUID
	info.Deleted = true
	info.Size, info.Chunks, info.Digest = 0, 0, ""
	if err := s.rewriteMeta(rctx, info, seq); bus.Conflict(err) {
		return false, nil // touched or written again meanwhile
	} else if err != nil {
		return false, fmt.Errorf("delete blob %s: %w", hash, err)
	}
	s.stored.Remove(hash)
	if err := s.stream.Purge(rctx, jetstream.WithPurgeSubject(snapshot.ChunkSubject(nuid))); err != nil {
		return true, fmt.Errorf("purge blob %s: %w", hash, err)
	}
	return true, nil
}
