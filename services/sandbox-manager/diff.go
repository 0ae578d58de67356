package sandboxmanager

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/snapshot"
)

// changes returns what the workspace of session changed since its base,
// as of its last snapshot; nil if it has no base. A base, or the lack of
// one, is looked up once: it never changes.
func (s *snapshots) changes(ctx context.Context, tenant string, session uuid.UUID) (*event.Changes, error) {
	key := bus.SessionKey(tenant, session)
	base, ok := s.bases.Get(key)
	if !ok {
		rctx, cancel := bus.Bound(ctx)
		var err error
		base, err = snapshot.ReadBase(rctx, s.store, tenant, session)
		cancel()
		if err != nil {
			return nil, err
		}
		s.bases.Add(key, base)
	}
	if base == nil {
		return nil, nil
	}
	// A call that changed nothing took no new snapshot: what changed is
	// what it was after the last one.
	seq, _ := s.seq.Get(key)
	if last, ok := s.lastChanges.Get(key); ok && seq != 0 && last.seq == seq {
		return last.changes, nil
	}
	rctx, cancel := bus.Bound(ctx)
	defer cancel()
	data, err := s.store.GetBytes(rctx, snapshot.ManifestName(tenant, session))
	if err != nil {
		return nil, fmt.Errorf("read the snapshot of %s: %w", session, err)
	}
	now, err := snapshot.DecodeManifest(data)
	if err != nil {
		return nil, fmt.Errorf("read the snapshot of %s: %w", session, err)
	}
	ch, err := snapshot.Changes(rctx, s.store, base.Files, now.Files, s.counted)
	if err == nil {
		s.lastChanges.Add(key, seqChanges{now.Seq, ch})
	}
	return ch, err
}

// seqChanges is what a workspace changed since its base, as of snapshot
// seq.
type seqChanges struct {
	seq     uint64
	changes *event.Changes
}
