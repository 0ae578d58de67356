package gateway

import (
	"context"
	"sync"

	"github.com/google/uuid"
	"github.com/hashicorp/golang-lru/v2/simplelru"

	"corral.dev/pkg/event"
	"corral.dev/pkg/sessionlog"
	"corral.dev/services/gateway/internal/wire"
)

// A session's API events cannot be made from a stretch of its log alone:
// whether a tool result is admitted depends on the calls dispatched before
// it, whether a decision resumes the session on the calls still held. So a
// page read from a cursor's stream sequence would still fold the log from
// its start. The gateway keeps instead the folded events of the sessions
// read lately, and reads of a session's log only what was stored since it
// last read it: a page costs a look-up of the log's last sequence and the
// events it returns.
//
// What is kept is the log as the server stored it, judged by rules that
// do not depend on who reads: keys of the same tenant find the same
// events. Every read still asks the server, through the request's own
// connection, for the session's last sequence, which a key that may not
// read the tenant's logs is refused.

// foldCache keeps the folded events of the sessions read lately, by
// tenant and session, up to a bound on their size: the least recently
// read go first.
type foldCache struct {
	mu    sync.Mutex
	lru   *simplelru.LRU[foldKey, *sessionFold]
	bytes int
	max   int
}

type foldKey struct {
	tenant  string
	session uuid.UUID
}

// defaultFoldBytes bounds the size of the folded events kept, as
// [sessionFold.bytes] estimates it.
const defaultFoldBytes = 256 << 20

// maxFolds bounds the sessions kept, whatever their size.
const maxFolds = 4096

func newFoldCache(maxBytes int) *foldCache {
	fc := &foldCache{max: maxBytes}
	fc.lru, _ = simplelru.NewLRU[foldKey, *sessionFold](maxFolds, func(_ foldKey, f *sessionFold) { fc.bytes -= f.bytes })
	return fc
}

// sessionFold is one session's log folded into the API's events, up to
// the stream sequence last. Its events are only ever appended to: a
// [view] of the first n stays valid while more are added.
type sessionFold struct {
	mu     sync.Mutex
	sess   *sessionlog.Session
	folder wire.Folder
	events []wire.Event
	last   uint64
	// turn is the last model turn folded.
	turn int
	// bytes is counted in the cache's size; guarded by the cache's mu.
	bytes int
}

// view is a session's events as far as one request read them.
type view struct {
	events []wire.Event
	user   string
	last   uint64
	turn   int
	// sess and folder, set for a stream, fold what comes after last.
	sess   *sessionlog.Session
	folder wire.Folder
}

// get returns the fold of tenant's session, a new one if none is kept.
func (fc *foldCache) get(tenant string, session uuid.UUID) *sessionFold {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	k := foldKey{tenant, session}
	if f, ok := fc.lru.Get(k); ok {
		return f
	}
	f := &sessionFold{sess: sessionlog.NewSession(tenant, session)}
	fc.lru.Add(k, f)
	return f
}

// grew counts n more bytes of f, kept under tenant's session, and lets go
// of the least recently read sessions while the cache is past its bound:
// never f itself, which its reader is using.
func (fc *foldCache) grew(tenant string, session uuid.UUID, f *sessionFold, n int) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	k := foldKey{tenant, session}
	if cur, ok := fc.lru.Peek(k); !ok || cur != f {
		return // let go of already
	}
	f.bytes += n
	fc.bytes += n
	for fc.bytes > fc.max && fc.lru.Len() > 1 {
		if oldest, _, _ := fc.lru.GetOldest(); oldest == k {
			fc.lru.Get(k) // f is the newest now
			continue
		}
		fc.lru.RemoveOldest()
	}
	if fc.bytes > fc.max {
		// f alone is past the bound: read afresh next time.
		fc.lru.Remove(k)
	}
}

// folded returns c's tenant's session as the API's events, as far as
// the log goes now: the events kept of it and those stored since, read
// through c's connection. For a stream, the view carries what folds the
// events after it.
func (s *Service) folded(ctx context.Context, c *caller, session uuid.UUID, stream bool) (view, error) {
	last, err := lastSeq(ctx, c.js, c.tenant, session)
	if err != nil {
		return view{}, err
	}
	f := s.folds.get(c.tenant, session)
	f.mu.Lock()
	defer f.mu.Unlock()
	if last > f.last {
		// Read with a copy of what the fold knows, kept only once the
		// read succeeds: a read cut short leaves the fold as it was.
		sess := f.sess.Clone()
		entries, err := c.logs.Read(ctx, sess, f.last)
		if err != nil {
			return view{}, err
		}
		f.sess = sess
		n := 0
		for _, en := range entries {
			evs := f.folder.Fold(en.Seq, en.Event)
			for _, ev := range evs {
				n += size(ev)
			}
			f.events = append(f.events, evs...)
			f.last = en.Seq
			if r, ok := en.Event.(*event.ModelResponded); ok {
				f.turn = max(f.turn, r.Turn)
			}
		}
		// The read went at least as far as last: events rejected at the
		// end are not read again (they would be rejected again).
		f.last = max(f.last, last)
		s.folds.grew(c.tenant, session, f, n)
	}
	v := view{events: f.events[:len(f.events):len(f.events)], user: f.sess.User(), last: f.last, turn: f.turn}
	if stream {
		v.sess, v.folder = f.sess.Clone(), f.folder.Clone()
	}
	return v, nil
}

// size estimates the memory an event takes.
func size(ev wire.Event) int {
	n := 256 + len(ev.ID) + len(ev.Input)
	for _, b := range ev.Content {
		n += len(b.Text)
	}
	if ev.Error != nil {
		n += len(ev.Error.Message)
	}
	return n
}
