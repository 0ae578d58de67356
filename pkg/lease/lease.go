// Package lease holds leases on keys of a JetStream key-value bucket whose
// entries expire: a key names its holder for as long as the holder writes
// it again, by revision, within the bucket's TTL. A harness's lease on a
// session, the usage counter's lease and a sandbox-manager node's lease
// are all one [Lease].
//
// Every write names the revision it replaces, so a holder whose lease ran
// out (and that another may have taken since) finds out at its next
// renewal instead of writing over the new holder. A renewal whose answer
// is lost may still have been applied: it is then read back, and counts
// as renewed if the key still names the holder.
package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
)

// ErrLost is returned by [Lease.Renew] when the lease is surely no longer
// held: the key expired, or names another holder.
var ErrLost = errors.New("lease lost")

// Bucket is a key-value bucket of leases.
type Bucket struct {
	KV jetstream.KeyValue
	// TTL is the bucket's: a lease lasts at least this long after the
	// last write that renewed it was sent.
	TTL time.Duration
	// Timeout bounds each operation on a lease (a renewal whole, however
	// many requests it makes); zero means a third of TTL (the time
	// between two renewals: a renewal slower than that has failed
	// anyway), at most [bus.RequestTimeout].
	Timeout time.Duration
}

// Lease is a key of a [Bucket] that names its holder. Its methods are safe
// for concurrent use.
type Lease struct {
	b      Bucket
	key    string
	holder []byte

	mu  sync.Mutex
	rev uint64
	// written is when the last write known to have applied was sent: the
	// lease runs at least TTL from then. Zero once the lease is lost or
	// given up.
	written time.Time
}

// Create takes the lease on key for holder if no one holds it (the key is
// missing or expired). When someone does, the error satisfies
// [bus.Conflict] (it wraps [jetstream.ErrKeyExists]).
func (b Bucket) Create(ctx context.Context, key string, holder []byte) (*Lease, error) {
	sent := time.Now()
	rev, err := b.KV.Create(ctx, key, holder)
	if err != nil {
		return nil, err
	}
	return b.At(key, holder, rev, sent), nil
}

// Update takes the lease on key for holder if the key is still at
// revision rev (whatever it holds): the holder read it, and found it free
// or its own. When it is not, the error satisfies [bus.Conflict].
func (b Bucket) Update(ctx context.Context, key string, holder []byte, rev uint64) (*Lease, error) {
	sent := time.Now()
	rev, err := b.KV.Update(ctx, key, holder, rev)
	if err != nil {
		return nil, err
	}
	return b.At(key, holder, rev, sent), nil
}

// Put takes the lease on key for holder whoever holds it: for a key only
// holder may hold (a node's own name).
func (b Bucket) Put(ctx context.Context, key string, holder []byte) (*Lease, error) {
	sent := time.Now()
	rev, err := b.KV.Put(ctx, key, holder)
	if err != nil {
		return nil, err
	}
	return b.At(key, holder, rev, sent), nil
}

// At returns the lease on key that holder wrote at revision rev, with the
// write sent at written.
func (b Bucket) At(key string, holder []byte, rev uint64, written time.Time) *Lease {
	return &Lease{b: b, key: key, holder: holder, rev: rev, written: written}
}

// Key returns the key the lease is on.
func (l *Lease) Key() string { return l.key }

// Rev returns the revision of the lease's last write.
func (l *Lease) Rev() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rev
}

// SureUntil returns when the lease stops being surely held without a
// renewal: half its TTL after its last write was sent, which leaves the
// other half for the clocks and the server's expiry to disagree. It is the
// zero time once the lease is lost or given up.
func (l *Lease) SureUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.written.IsZero() {
		return time.Time{}
	}
	return l.written.Add(l.b.TTL / 2)
}

// Sure reports whether the lease is surely held: see [Lease.SureUntil].
func (l *Lease) Sure() bool {
	return time.Now().Before(l.SureUntil())
}

// Renew writes the lease again on its revision. If the write fails, the
// key is read back: a write whose answer was lost may have applied, and
// the lease is still held if the key names its holder at a later revision,
// where it is written again. It returns an error
// wrapping [ErrLost] when the lease is surely lost, and another error when
// it could not tell (the server is out of reach): the lease then stays
// held until [Lease.SureUntil], unless a later renewal succeeds.
func (l *Lease) Renew(ctx context.Context) error {
	l.mu.Lock()
	rev := l.rev
	l.mu.Unlock()
	sent := time.Now()
	// One bound for the whole renewal, however many requests it makes.
	rctx, cancel := l.bound(ctx)
	defer cancel()
	r, err := l.b.KV.Update(rctx, l.key, l.holder, rev)
	if err == nil {
		l.renewed(r, sent)
		return nil
	}
	e, gerr := l.b.KV.Get(rctx, l.key)
	switch {
	case gerr == nil && string(e.Value()) == string(l.holder) && e.Revision() != rev:
		// A write of ours applied, its answer lost (maybe an earlier
		// renewal's, sent before this one): write again on it, so that
		// the lease counts from a write sent now.
		sent = time.Now()
		if r, err = l.b.KV.Update(rctx, l.key, l.holder, e.Revision()); err == nil {
			l.renewed(r, sent)
			return nil
		}
	case gerr == nil && string(e.Value()) == string(l.holder):
		// Nothing was written: the server did not answer in time.
	case gerr == nil, errors.Is(gerr, jetstream.ErrKeyNotFound):
		l.lost()
		return fmt.Errorf("lease %s: %w: %w", l.key, ErrLost, err)
	}
	return fmt.Errorf("renew lease %s: %w", l.key, err)
}

func (l *Lease) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, cmp.Or(l.b.Timeout, min(bus.RequestTimeout, l.b.TTL/3)))
}

func (l *Lease) renewed(rev uint64, sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rev, l.written = rev, sent
}

func (l *Lease) lost() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.written = time.Time{}
}

// Keep renews the lease every period after its last write until ctx is done, when it returns
// nil, or until a renewal fails, whose error it returns: a holder that
// cannot renew its lease must take it for lost.
func (l *Lease) Keep(ctx context.Context, every time.Duration) error {
	t := time.NewTimer(l.untilRenewal(every))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := l.Renew(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		t.Reset(l.untilRenewal(every))
	}
}

// untilRenewal returns how long until the lease is due for renewal, every
// after its last write: a lease kept from an earlier holding (a lingering
// one) is renewed on time, not every after it is kept again.
func (l *Lease) untilRenewal(every time.Duration) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return max(time.Until(l.written.Add(every)), 0)
}

// Hold keeps the lease (see [Lease.Keep]) while the holder works with the
// returned ctx, which is cancelled, with the renewal's error as its cause,
// if the lease is lost: the work stops rather than go on for a lease
// someone else may hold now. stop ends the renewals and waits for them to
// end; it returns the renewal's error if the lease was lost.
func (l *Lease) Hold(ctx context.Context, every time.Duration) (_ context.Context, stop func() error) {
	ctx, cancel := context.WithCancelCause(ctx)
	renewals, stopRenewals := context.WithCancel(ctx)
	done := make(chan struct{})
	var lost error
	go func() {
		defer close(done)
		if lost = l.Keep(renewals, every); lost != nil {
			cancel(lost)
		}
	}()
	return ctx, func() error {
		stopRenewals()
		<-done
		cancel(nil)
		return lost
	}
}

// Free gives the lease up by writing an empty value on its revision
// rather than deleting the key, and returns the revision written: the
// next holder takes it with one compare-and-set on that revision.
func (l *Lease) Free(ctx context.Context) (uint64, error) {
	l.mu.Lock()
	rev := l.rev
	l.written = time.Time{}
	l.mu.Unlock()
	r, err := l.b.KV.Update(ctx, l.key, nil, rev)
	if err != nil {
		return 0, fmt.Errorf("free lease %s: %w", l.key, err)
	}
	return r, nil
}

// Delete gives the lease up by deleting the key, if it still holds this
// lease: at its revision, or, should that have moved on under a renewal
// whose answer was lost, at the revision read back if the key still names
// the holder.
func (l *Lease) Delete(ctx context.Context) error {
	l.mu.Lock()
	rev := l.rev
	l.written = time.Time{}
	l.mu.Unlock()
	err := l.b.KV.Delete(ctx, l.key, jetstream.LastRevision(rev))
	if err == nil || !bus.Conflict(err) {
		return err
	}
	e, gerr := l.b.KV.Get(ctx, l.key)
	switch {
	case errors.Is(gerr, jetstream.ErrKeyNotFound):
		return nil // gone
	case gerr != nil:
		return fmt.Errorf("delete lease %s: %w", l.key, gerr)
	case string(e.Value()) != string(l.holder):
		return nil // not ours any more
	}
	return l.b.KV.Delete(ctx, l.key, jetstream.LastRevision(e.Revision()))
}
