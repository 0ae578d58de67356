// Package lock serialises work per key inside one process: a session's
// steps in the harness, a session's calls in the sandbox-manager. Its
// [Gate] also bounds work per group (a tenant's) and in all, and lets work
// that waits for its key or group wait without taking a slot.
package lock

import (
	"context"
	"sync"
)

// Keyed is a set of mutexes, one per key, that exist only while held or
// waited for. The zero value is ready to use.
type Keyed struct {
	mu    sync.Mutex
	locks map[string]*entry
}

type entry struct {
	ch   chan struct{}
	refs int
}

// Lock waits until it holds key's lock or ctx is done, and returns the
// function that releases it. It returns ctx's error if it gave up waiting.
func (k *Keyed) Lock(ctx context.Context, key string) (unlock func(), err error) {
	unlock, ok := k.lock(ctx.Done(), key)
	if !ok {
		return nil, ctx.Err()
	}
	return unlock, nil
}

// Wait waits however long it takes to hold key's lock, and returns the
// function that releases it: for work that must be done, behind a holder
// whose own bounds limit the wait.
func (k *Keyed) Wait(key string) (unlock func()) {
	unlock, _ = k.lock(nil, key) // a nil channel never fires
	return unlock
}

// lock waits until it holds key's lock, or gives up with ok false when
// done is closed.
func (k *Keyed) lock(done <-chan struct{}, key string) (unlock func(), ok bool) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = make(map[string]*entry)
	}
	e := k.locks[key]
	if e == nil {
		e = &entry{ch: make(chan struct{}, 1)}
		k.locks[key] = e
	}
	e.refs++
	k.mu.Unlock()
	select {
	case e.ch <- struct{}{}:
		return func() { <-e.ch; k.release(key, e) }, true
	case <-done:
		k.release(key, e)
		return nil, false
	}
}

// TryLock takes key's lock if no one holds it or waits for it, and
// returns the function that releases it; ok is false when it did not.
func (k *Keyed) TryLock(key string) (unlock func(), ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.locks[key] != nil {
		return nil, false
	}
	if k.locks == nil {
		k.locks = make(map[string]*entry)
	}
	e := &entry{ch: make(chan struct{}, 1), refs: 1}
	e.ch <- struct{}{}
	k.locks[key] = e
	return func() { <-e.ch; k.release(key, e) }, true
}

func (k *Keyed) release(key string, e *entry) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if e.refs--; e.refs == 0 {
		delete(k.locks, key)
	}
}

// Held reports whether key's lock is held or waited for.
func (k *Keyed) Held(key string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.locks[key] != nil
}
