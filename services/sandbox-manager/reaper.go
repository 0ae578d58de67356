package sandboxmanager

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
)

// The reaper removes, at start and then every [Config.ReapInterval], the
// workspaces here that no session needs any more: this node's own from
// before a restart included. A workspace goes when its session
//   - has no log (it never existed, or its events were removed): its
//     snapshot goes too;
//   - ended: stopped, or failed (a follow-up would restore it from its
//     snapshot);
//   - is placed on another node, which holds the current copy;
//   - had no call here for [Config.WorkspaceTTL] while snapshots are on:
//     its next call, wherever it lands, restores it from its snapshot.
// A workspace with a sandbox or a call is left alone. Each run then sweeps
// the snapshots' stored files that no manifest names (see sweep.go).

// reap runs the reaper until ctx is done.
func (s *Service) reap(ctx context.Context) {
	for {
		n := s.reapOnce(ctx)
		if n > 0 {
			s.log.InfoContext(ctx, "workspaces reaped", "count", n)
		}
		if s.snaps != nil {
			n, err := s.snaps.sweep(ctx)
			if err != nil && ctx.Err() == nil {
				s.log.WarnContext(ctx, "sweep snapshots", "err", err)
			}
			if n > 0 {
				s.log.InfoContext(ctx, "stored files no snapshot names collected", "count", n)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.cfg.ReapInterval):
		}
	}
}

// reapOnce removes the workspaces no session needs and returns how many.
func (s *Service) reapOnce(ctx context.Context) int {
	dirs, _ := filepath.Glob(filepath.Join(s.cfg.DataDir, "workspaces", "*", "*"))
	n := 0
	for _, dir := range dirs {
		if ctx.Err() != nil {
			break
		}
		tenant := filepath.Base(filepath.Dir(dir))
		session, err := uuid.Parse(filepath.Base(dir))
		if err != nil || s.driver.Workspace(tenant, session) != dir || s.driver.Active(tenant, session) {
			continue
		}
		if s.reapOne(ctx, tenant, session, dir) {
			n++
		}
	}
	return n
}

// reapOne removes a session's workspace if no session needs it, and
// reports whether it did. It holds the session's lock, so no call runs
// (or snapshots the workspace) meanwhile.
func (s *Service) reapOne(ctx context.Context, tenant string, session uuid.UUID, dir string) bool {
	unlock, err := s.sessions.Lock(ctx, bus.SessionKey(tenant, session))
	if err != nil {
		return false
	}
	defer unlock()
	if s.driver.Active(tenant, session) {
		return false
	}
	why, dropSnapshot := s.unneeded(ctx, tenant, session, dir)
	if why == "" {
		return false
	}
	if err := s.driver.Destroy(ctx, tenant, session); err != nil {
		s.log.WarnContext(ctx, "reap workspace", "tenant", tenant, "session", session, "err", err)
		return false
	}
	s.notes.drop(tenant, session)
	if s.snaps != nil {
		s.snaps.gone(tenant, session)
		if dropSnapshot {
			s.snaps.drop(ctx, tenant, session)
		}
	}
	s.place.release(ctx, tenant, session)
	s.metrics.reaped.WithLabelValues(why).Inc()
	s.log.DebugContext(ctx, "workspace reaped", "tenant", tenant, "session", session, "why", why)
	return true
}

// unneeded says why a session's workspace here may go ("" if it may not),
// and whether its snapshot may go too.
func (s *Service) unneeded(ctx context.Context, tenant string, session uuid.UUID, dir string) (why string, dropSnapshot bool) {
	// The session's last lifecycle event the log accepts: one the
	// harness wrote, on the subject of this tenant's session.
	last, ok, err := s.lastLifecycle(ctx, tenant, session)
	switch {
	case err != nil:
		return "", false
	case !ok:
		return "no_session", true
	case last.Type == event.TypeSessionStopped || last.Type == event.TypeSessionFailed:
		return "ended", false
	}
	rctx, cancel := bus.Bound(ctx)
	defer cancel()
	if e, err := s.place.places.Get(rctx, bus.PlacementKey(tenant, session)); err == nil && string(e.Value()) != s.place.node {
		return "moved", false
	}
	if fi, err := os.Stat(dir); err == nil && s.snaps != nil && !s.snaps.isDirty(tenant, session) && time.Since(fi.ModTime()) > s.cfg.WorkspaceTTL {
		return "idle", false
	}
	return "", false
}
