package sandbox

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/egressapi"
)

// session is the Driver's state for one workspace: its live sandbox, if
// it has one. Its calls (and Destroy, and an idle stop) hold its lock in
// [Driver.locks], by workspace path, one at a time.
type session struct {
	key string // the workspace path
	// id is set by the holder of the lock, for the sandbox it starts and
	// the egress service; resumable, whether its workspace was there
	// before the call; replaced, whether the call started a new sandbox
	// in place of one that is gone (see [Result].NewSandbox).
	id        egressapi.Identity
	resumable bool
	replaced  bool
	// refill asks the holder of the lock to fill the pool for tenant and
	// skills once its call is done.
	refill bool
	skills string

	// The rest is guarded by Driver.mu. box is set and cleared only by the
	// holder of the lock; Close kills it without clearing it.
	refs  int         // holders and waiters of the lock
	box   *box        // the live sandbox, or nil
	timer *time.Timer // suspends box once the session is idle, then stops it
	calls uint64      // counts calls, so a late idle timer knows it is stale
	// suspendedAt is when box was suspended; zero while it runs, or once it
	// is picked to be stopped.
	suspendedAt time.Time
}

// lock takes the lock of the session whose workspace is key and returns
// the session and the func that releases it, or gives up with ok false
// when ctx is done. Releasing the lock of a session with a live sandbox
// starts its idle timer.
func (d *Driver) lock(ctx context.Context, key string) (s *session, unlock func(), ok bool) {
	s = d.ref(key)
	release, err := d.locks.Lock(ctx, key)
	if err != nil {
		d.unref(s)
		return nil, nil, false
	}
	return s, d.locked(s, release), true
}

// lockWait is lock waiting however long it takes: behind a call, which its
// timeout bounds.
func (d *Driver) lockWait(key string) (s *session, unlock func()) {
	s = d.ref(key)
	return s, d.locked(s, d.locks.Wait(key))
}

// ref returns the session whose workspace is key, counting a reference to
// it.
func (d *Driver) ref(key string) *session {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.sessions[key]
	if s == nil {
		s = &session{key: key}
		d.sessions[key] = s
	}
	s.refs++
	return s
}

// locked notes a call of s, whose lock is now held, and returns the func
// that releases the lock with release.
func (d *Driver) locked(s *session, release func()) (unlock func()) {
	d.mu.Lock()
	s.calls++
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	d.mu.Unlock()
	return func() {
		d.mu.Lock()
		if s.box != nil && !d.closed {
			gen := s.calls
			s.timer = time.AfterFunc(d.cfg.IdleTimeout, func() { d.stopIdle(s, gen) })
		}
		d.mu.Unlock()
		release()
		d.unref(s)
	}
}

// unref drops a reference to s, and s itself once nothing refers to it and
// it has no sandbox.
func (d *Driver) unref(s *session) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s.refs--; s.refs == 0 && s.box == nil {
		delete(d.sessions, s.key)
	}
}

// stopIdle suspends the sandbox of s, or stops it if it is suspended
// already or cannot be suspended, unless a call came after the one that
// armed the timer (whose count was gen) or the Driver is closed. Its
// workspace stays either way.
func (d *Driver) stopIdle(s *session, gen uint64) {
	d.mu.Lock()
	if d.closed || s.box == nil || s.calls != gen {
		d.mu.Unlock()
		return
	}
	s.refs++
	d.idle.Add(1)
	d.mu.Unlock()
	defer d.idle.Done()

	release := d.locks.Wait(s.key) // a call that slipped in first is bounded by its timeout
	d.mu.Lock()
	var b *box
	if s.calls == gen && !d.closed {
		b = s.box
	}
	d.mu.Unlock()
	if b != nil && !b.suspended() && b.canFreeze() && b.alive() && b.freeze() == nil {
		d.mu.Lock()
		s.suspendedAt = time.Now()
		s.timer = time.AfterFunc(d.cfg.StopTimeout, func() { d.stopIdle(s, gen) })
		evict := d.oldestSuspendedLocked()
		d.mu.Unlock()
		if evict != nil {
			d.stopAsync(evict)
		}
	} else if b != nil {
		d.mu.Lock()
		s.box, s.suspendedAt = nil, time.Time{}
		d.mu.Unlock()
		b.stop()
	}
	release()
	d.unref(s)
}

// oldestSuspendedLocked returns the session whose sandbox has been
// suspended longest when more than MaxSuspended are, marking it as picked;
// nil otherwise. The caller holds d.mu.
func (d *Driver) oldestSuspendedLocked() *session {
	var n int
	var oldest *session
	for _, s := range d.sessions {
		if s.suspendedAt.IsZero() {
			continue
		}
		n++
		if oldest == nil || s.suspendedAt.Before(oldest.suspendedAt) {
			oldest = s
		}
	}
	if n <= d.cfg.MaxSuspended {
		return nil
	}
	oldest.suspendedAt = time.Time{}
	return oldest
}

// stopAsync stops the suspended sandbox of s, unless a call comes first.
func (d *Driver) stopAsync(s *session) {
	d.mu.Lock()
	if s.timer != nil {
		s.timer.Stop()
	}
	gen := s.calls
	d.mu.Unlock()
	go d.stopIdle(s, gen)
}

// liveBox returns the live sandbox of s, starting one around workspace if
// it has none or its sandbox died since the last call. fresh reports a new
// one. A new one has the layer of the session's environment, if
// [Config.Layer] gives one, and network if the egress service, opened for
// s, says so; with neither, it may be a pooled one. The caller holds the
// lock of s.
func (d *Driver) liveBox(ctx context.Context, s *session, workspace string) (b *box, fresh bool, err error) {
	d.mu.Lock()
	b = s.box
	s.suspendedAt = time.Time{}
	d.mu.Unlock()
	if b != nil && b.alive() {
		if !b.suspended() {
			return b, false, nil
		}
		start := time.Now()
		if err := b.thaw(); err == nil {
			if d.cfg.OnStart != nil {
				d.cfg.OnStart(StartResume, time.Since(start))
			}
			return b, false, nil
		}
	}
	if b != nil {
		d.discard(s, b)
	}
	var skills string
	if d.cfg.Skills != nil {
		if skills, err = d.cfg.Skills(ctx, s.id.Tenant); err != nil {
			return nil, false, fmt.Errorf("skills: %w", err)
		}
	}
	layer, err := d.layer(ctx, s)
	if err != nil {
		return nil, false, err
	}
	if d.owner != nil {
		if err := d.owner.ownTree(workspace); err != nil {
			return nil, false, err
		}
	}
	start := time.Now()
	egress, err := d.openEgress(ctx, s)
	if err != nil {
		return nil, false, err
	}
	b = nil
	pooled := egress == "" && layer.Dir == ""
	if pooled {
		// A pooled sandbox has no network and no layer (see pool.go).
		b, err = d.take(s.id.Tenant, skills, workspace)
	}
	if b == nil && err == nil {
		b, err = d.startBox(workspace, skills, egress, layerMount{dir: layer.Dir})
	}
	if err != nil {
		return nil, false, err
	}
	// Filled again once the call is done, so as not to slow it down.
	s.refill, s.skills = pooled, skills
	if d.cfg.OnStart != nil {
		kind := StartCold
		if s.resumable {
			kind = StartRestart
		}
		d.cfg.OnStart(kind, time.Since(start))
	}
	s.resumable = true
	d.mu.Lock()
	closed := d.closed
	if !closed {
		s.box = b
		if _, had := d.hadBox[workspace]; had && !preparing(s.id) {
			s.replaced = true
		}
	}
	d.mu.Unlock()
	if closed {
		b.kill()
		<-b.done
		return nil, false, errClosed
	}
	return b, true, nil
}

// ran notes that b, the sandbox of s, started a call on its workspace:
// its executor said hello, so a command may have left files outside the
// workspace, which a sandbox after it will not have. A sandbox that
// prepares the workspace ([egressapi.Identity].Fetch) is no session's
// own: the session's first sandbox after it is not new to the model.
func (d *Driver) ran(s *session, b *box) {
	if !b.greeted || preparing(s.id) {
		return
	}
	d.mu.Lock()
	d.hadBox[s.key] = struct{}{}
	d.mu.Unlock()
}

// preparing reports whether id is a sandbox's that prepares a workspace
// or builds an environment's layer, not the session's own.
func preparing(id egressapi.Identity) bool {
	return id.Fetch != "" || id.Phase != ""
}

// discard kills b, the sandbox of s, and waits for it to end.
func (d *Driver) discard(s *session, b *box) {
	d.mu.Lock()
	if s.box == b {
		s.box = nil
	}
	d.mu.Unlock()
	b.kill()
	<-b.done
}

// Live returns how many sandboxes have processes: started and not
// stopped since, whether running a call, idle, or suspended (of which
// there are suspended).
func (d *Driver) Live() (live, suspended int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range d.sessions {
		if s.box != nil {
			live++
			if !s.suspendedAt.IsZero() || s.box.suspended() {
				suspended++
			}
		}
	}
	return live, suspended
}

// Close stops every live sandbox and waits for them to end. Idle ones are
// asked to exit; any still running after a second, such as one in the
// middle of a call, is killed, and that call fails. Run fails once Close
// has begun; Destroy still removes workspaces. Close is idempotent.
func (d *Driver) Close() {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	d.closed = true
	var boxes []*box
	for _, s := range d.sessions {
		if s.timer != nil {
			s.timer.Stop()
		}
		if s.box != nil {
			boxes = append(boxes, s.box)
		}
	}
	var pool []pooled
	for _, list := range d.pool {
		pool = append(pool, list...)
	}
	clear(d.pool)
	d.mu.Unlock()
	var wg sync.WaitGroup
	for _, b := range boxes {
		wg.Go(b.stop)
	}
	for _, p := range pool {
		wg.Go(func() { d.discardPooled(p) })
	}
	wg.Wait()
	d.idle.Wait()
	_ = os.RemoveAll(d.poolDir())
	d.starter.stop()
	if d.cgroups != nil {
		d.cgroups.close()
	}
}

// Active reports whether a session has a sandbox here, or a call running
// or waiting.
func (d *Driver) Active(tenant string, session uuid.UUID) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.sessions[d.Workspace(tenant, session)]
	return s != nil && (s.box != nil || s.refs > 0)
}
