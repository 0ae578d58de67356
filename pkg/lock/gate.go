package lock

import (
	"context"
	"sync"
)

// Gate admits work in the order it entered, with three bounds: one at a
// time per key (a session's calls), at most PerGroup at once per group (a
// tenant's), and at most Size at once in all (the slots). Work that waits
// for its key or its group holds no slot, so other keys and groups go on
// meanwhile. The zero value admits everything at once.
type Gate struct {
	// Size bounds the work admitted at once; zero or less is no bound.
	Size int
	// PerGroup bounds the work of one group admitted at once; zero or
	// less is no bound.
	PerGroup int

	mu      sync.Mutex
	waiting []*Ticket
	running int
	keys    map[string]int // admitted holders of each key, yielded ones too
	groups  map[string]int // admitted work of each group, yielded not
	// changed is closed, and made anew, whenever admissions may have
	// changed.
	changed chan struct{}
}

// Ticket is one piece of work's place at a [Gate], from [Gate.Enter]
// until [Ticket.Done].
type Ticket struct {
	g            *Gate
	key, group   string
	admitted     chan struct{}
	in, yielded  bool // admitted; slot and group given back
	left, closed bool
}

// Enter queues work of key and group ("" for none: then it waits for
// neither) behind all work that entered before it, and returns its ticket.
// The caller must end it with [Ticket.Wait] failing or [Ticket.Done].
func (g *Gate) Enter(key, group string) *Ticket {
	t := &Ticket{g: g, key: key, group: group, admitted: make(chan struct{})}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.keys == nil {
		g.keys, g.groups = make(map[string]int), make(map[string]int)
		g.changed = make(chan struct{})
	}
	g.waiting = append(g.waiting, t)
	g.admit()
	return t
}

// Waiting returns how much work waits to be admitted.
func (g *Gate) Waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.waiting)
}

// admit admits, in order, the waiting work that no bound holds back. The
// caller holds g.mu.
func (g *Gate) admit() {
	ahead := make(map[string]bool) // keys of work waiting ahead
	kept := g.waiting[:0]
	for _, t := range g.waiting {
		if g.Size > 0 && g.running >= g.Size || g.heldBack(t, ahead) {
			if t.key != "" {
				ahead[t.key] = true
			}
			kept = append(kept, t)
			continue
		}
		g.running++
		if t.key != "" {
			g.keys[t.key]++
		}
		if t.group != "" {
			g.groups[t.group]++
		}
		t.in = true
		close(t.admitted)
	}
	clear(g.waiting[len(kept):])
	g.waiting = kept
	close(g.changed)
	g.changed = make(chan struct{})
}

// heldBack reports whether t waits for its key or its group rather than
// for a slot; ahead holds the keys of work waiting ahead of t.
func (g *Gate) heldBack(t *Ticket, ahead map[string]bool) bool {
	if t.key != "" && (g.keys[t.key] > 0 || ahead[t.key]) {
		return true
	}
	return t.group != "" && g.PerGroup > 0 && g.groups[t.group] >= g.PerGroup
}

// Admitted reports whether t is admitted, without waiting.
func (t *Ticket) Admitted() bool {
	select {
	case <-t.admitted:
		return true
	default:
		return false
	}
}

// Wait waits until t is admitted or ctx is done. It returns ctx's error
// if it gave up, and t is then done: it left the queue, or gave back what
// it was admitted to.
func (t *Ticket) Wait(ctx context.Context) error {
	select {
	case <-t.admitted:
		return nil
	case <-ctx.Done():
	}
	// Decided under one hold of the lock: admitted meanwhile, t gives
	// back what it was admitted to; else it leaves the queue.
	t.g.mu.Lock()
	defer t.g.mu.Unlock()
	if t.in {
		t.done()
	} else {
		t.leave()
	}
	return ctx.Err()
}

// Queued waits until t is admitted, or waits only for its key or its
// group, or ctx is done; it returns ctx's error in that last case. A
// consumer calls it before it takes more work: while work that could run
// waits for a slot, the process has no room for more.
func (t *Ticket) Queued(ctx context.Context) error {
	g := t.g
	for {
		g.mu.Lock()
		if t.in || t.left {
			g.mu.Unlock()
			return nil
		}
		ahead := make(map[string]bool)
		for _, w := range g.waiting {
			if w == t {
				break
			}
			if w.key != "" {
				ahead[w.key] = true
			}
		}
		held := g.heldBack(t, ahead)
		changed := g.changed
		g.mu.Unlock()
		if held {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Yield gives back t's slot and its place in its group, keeping its key:
// for admitted work that from now on only waits for work done elsewhere.
// Work of the same key still waits for it.
func (t *Ticket) Yield() {
	g := t.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if !t.in || t.yielded || t.closed {
		return
	}
	t.yielded = true
	g.running--
	g.leaveGroup(t)
	g.admit()
}

// Done ends admitted work: its key, slot and group go to the work waiting
// for them. Calling it again does nothing.
func (t *Ticket) Done() {
	t.g.mu.Lock()
	defer t.g.mu.Unlock()
	t.done()
}

// done is [Ticket.Done]; the caller holds g.mu.
func (t *Ticket) done() {
	g := t.g
	if !t.in || t.closed {
		return
	}
	t.closed = true
	if !t.yielded {
		g.running--
		g.leaveGroup(t)
	}
	if t.key != "" {
		if g.keys[t.key]--; g.keys[t.key] == 0 {
			delete(g.keys, t.key)
		}
	}
	g.admit()
}

// leave takes t, not admitted, out of the queue. The caller holds g.mu.
func (t *Ticket) leave() {
	g := t.g
	for i, w := range g.waiting {
		if w == t {
			g.waiting = append(g.waiting[:i], g.waiting[i+1:]...)
			break
		}
	}
	t.left = true
	g.admit()
}

// leaveGroup counts t out of its group. The caller holds g.mu.
func (g *Gate) leaveGroup(t *Ticket) {
	if t.group == "" {
		return
	}
	if g.groups[t.group]--; g.groups[t.group] == 0 {
		delete(g.groups, t.group)
	}
}
