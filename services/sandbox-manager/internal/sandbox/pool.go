package sandbox

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The pool: sandboxes started ahead of need, up to Config.PoolSize for
// each tenant that started one lately, each around an empty directory of
// its own under Dir/.pool (on the workspaces' file system; no tenant name
// starts with a dot). A session that needs a sandbox takes a pooled one
// when there is one for its tenant, with the same skills: the session's
// files move into the pooled directory, which then takes the workspace's
// place, all by renames. bwrap's bind mount follows the directory, not its
// name, so the sandbox sees the session's files at /workspace, and the
// start costs a few renames instead of a bwrap start. The pool is filled
// again in the background.
//
// A pooled sandbox has no network: its mounts are made before anyone
// knows whose it will be. So a session that the egress service gives
// network never takes one, and its starts fill no pool.

// maxPooledTenants bounds the tenants the pool keeps sandboxes for.
const maxPooledTenants = 8

type pooled struct {
	b      *box
	dir    string
	skills string
}

// poolDir is where the pooled sandboxes' directories are.
func (d *Driver) poolDir() string {
	return filepath.Join(d.cfg.Dir, ".pool")
}

// take returns a pooled sandbox for tenant and skills, now around
// workspace, or nil if there is none.
func (d *Driver) take(tenant, skills, workspace string) (*box, error) {
	var p *pooled
	var stale []pooled
	d.mu.Lock()
	list := d.pool[tenant]
	for p == nil && len(list) > 0 {
		last := list[len(list)-1]
		list = list[:len(list)-1]
		if last.skills == skills && last.b.alive() {
			p = &last
		} else {
			stale = append(stale, last)
		}
	}
	d.pool[tenant] = list
	d.mu.Unlock()
	for _, s := range stale {
		d.discardPooled(s)
	}
	if p == nil {
		return nil, nil
	}
	if err := adopt(p.dir, workspace); err != nil {
		d.discardPooled(*p)
		return nil, fmt.Errorf("move the workspace into a pooled sandbox: %w", err)
	}
	return p.b, nil
}

// adopt makes dir the workspace: the workspace's entries move into dir,
// and dir takes the workspace's name. On failure the entries moved go
// back.
func adopt(dir, workspace string) error {
	entries, err := os.ReadDir(workspace)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var moved []string
	undo := func() {
		for _, name := range moved {
			_ = os.Rename(filepath.Join(dir, name), filepath.Join(workspace, name))
		}
	}
	for _, e := range entries {
		if err := os.Rename(filepath.Join(workspace, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			undo()
			return err
		}
		moved = append(moved, e.Name())
	}
	if err := os.Remove(workspace); err != nil && !errors.Is(err, os.ErrNotExist) {
		undo()
		return err
	}
	if err := os.Rename(dir, workspace); err != nil {
		_ = os.Mkdir(workspace, 0o755)
		undo()
		return err
	}
	return nil
}

// refill starts pooled sandboxes for tenant in the background, up to the
// pool's size.
func (d *Driver) refill(tenant, skills string) {
	if d.cfg.PoolSize <= 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	if _, ok := d.pool[tenant]; !ok && len(d.pool) >= maxPooledTenants {
		return
	}
	for n := len(d.pool[tenant]) + d.filling[tenant]; n < d.cfg.PoolSize; n++ {
		d.filling[tenant]++
		d.idle.Add(1)
		go d.fill(tenant, skills)
	}
}

func (d *Driver) fill(tenant, skills string) {
	defer d.idle.Done()
	dir := filepath.Join(d.poolDir(), strings.ToLower(rand.Text()))
	err := os.MkdirAll(filepath.Dir(dir), 0o755)
	if err == nil {
		err = d.owner.makeDir(dir)
	}
	var b *box
	if err == nil {
		b, err = d.startBox(dir, skills, "", layerMount{})
	}
	if err == nil {
		// Ready before it is pooled: bwrap must have bound dir before
		// dir is renamed.
		timer := time.AfterFunc(probeTimeout, b.kill)
		err = b.greet()
		timer.Stop()
	}
	d.mu.Lock()
	d.filling[tenant]--
	if err == nil && !d.closed {
		d.pool[tenant] = append(d.pool[tenant], pooled{b: b, dir: dir, skills: skills})
		d.mu.Unlock()
		return
	}
	d.mu.Unlock()
	if b != nil {
		d.discardPooled(pooled{b: b, dir: dir})
	} else {
		os.RemoveAll(dir)
	}
}

// discardPooled stops a pooled sandbox and removes its directory.
func (d *Driver) discardPooled(p pooled) {
	p.b.stop()
	os.RemoveAll(p.dir)
}

// Pooled returns how many sandboxes wait in the pool.
func (d *Driver) Pooled() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, list := range d.pool {
		n += len(list)
	}
	return n
}
