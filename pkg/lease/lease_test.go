package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/lease"
	"corral.dev/pkg/natstest"
)

// newBucket returns a bucket of leases that last ttl, on an embedded
// server.
func newBucket(t *testing.T, ttl time.Duration) lease.Bucket {
	t.Helper()
	_, _, js := natstest.Run(t)
	kv, err := js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: "test-leases", TTL: ttl, History: 1})
	if err != nil {
		t.Fatal(err)
	}
	return lease.Bucket{KV: kv, TTL: ttl, Timeout: time.Second}
}

func holderOf(t *testing.T, b lease.Bucket, key string) string {
	t.Helper()
	e, err := b.KV.Get(context.Background(), key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "(none)"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(e.Value())
}

// One holder at a time: a lease held is not created again, and one
// renewed stays its holder's and surely held.
func TestCreateAndRenew(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBucket(t, 5*time.Second)
	a, err := b.Create(ctx, "k", []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Create(ctx, "k", []byte("b")); !bus.Conflict(err) {
		t.Fatalf("created a lease a holds: %v", err)
	}
	before, written := a.Rev(), time.Now()
	if err := a.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if a.Rev() <= before {
		t.Errorf("renewed at revision %d, want past %d", a.Rev(), before)
	}
	if !a.Sure() || a.SureUntil().Before(written.Add(b.TTL/2)) {
		t.Errorf("renewed lease sure %v until %v, want at least half its TTL from the renewal", a.Sure(), a.SureUntil())
	}
	if h := holderOf(t, b, "k"); h != "a" {
		t.Errorf("lease holds %q, want a", h)
	}
}

// A renewal whose answer was lost was applied: the next renewal, on the
// revision before it, finds the lease still its own.
func TestRenewAfterALostAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBucket(t, 5*time.Second)
	a, err := b.Create(ctx, "k", []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	// The renewal that applied, unknown to a.
	applied, err := b.KV.Update(ctx, "k", []byte("a"), a.Rev())
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Renew(ctx); err != nil {
		t.Fatalf("a renewal after one whose answer was lost: %v", err)
	}
	if a.Rev() < applied || !a.Sure() {
		t.Errorf("lease at revision %d, sure %v; want at least %d, sure", a.Rev(), a.Sure(), applied)
	}
	if err := a.Renew(ctx); err != nil {
		t.Fatalf("the next renewal: %v", err)
	}
}

// A lease kept again, written a while ago, is renewed every period after
// that write, not every period after it is kept again.
func TestKeepRenewsFromTheLastWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBucket(t, 5*time.Second)
	a, err := b.Create(ctx, "k", []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	every := b.TTL / 3
	kept := b.At("k", []byte("a"), a.Rev(), time.Now().Add(-every+100*time.Millisecond))
	_, stop := kept.Hold(ctx, every)
	defer stop()
	time.Sleep(every / 2)
	if kept.Rev() == a.Rev() {
		t.Errorf("not renewed %v after it was kept, though written %v before", every/2, every-100*time.Millisecond)
	}
}

// unanswered is a bucket whose writes never reach the server, as when
// the server does not answer in time.
type unanswered struct{ jetstream.KeyValue }

func (unanswered) Update(context.Context, string, []byte, uint64) (uint64, error) {
	return 0, nats.ErrTimeout
}

// A renewal that wrote nothing is no renewal: it fails, not as lost, and
// the lease is surely held no longer than its last write allows.
func TestRenewThatWroteNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBucket(t, 5*time.Second)
	a, err := b.Create(ctx, "k", []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	cut := lease.Bucket{KV: unanswered{b.KV}, TTL: b.TTL, Timeout: b.Timeout}
	stale := cut.At("k", []byte("a"), a.Rev(), time.Now())
	until := stale.SureUntil()
	time.Sleep(10 * time.Millisecond)
	if err := stale.Renew(ctx); err == nil || errors.Is(err, lease.ErrLost) {
		t.Errorf("a renewal that wrote nothing: %v, want an error, not ErrLost", err)
	}
	if got := stale.SureUntil(); got.After(until) {
		t.Errorf("after a renewal that wrote nothing, sure until %v, past %v that the last write allows", got, until)
	}
}

// A lease another holder took, or that expired, is lost; one that cannot
// be renewed for want of an answer is not known lost, and stays surely
// held for what is left of half its TTL.
func TestRenewLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBucket(t, 5*time.Second)
	for _, tc := range []struct {
		name  string
		after func(key string)
	}{
		{"taken", func(key string) {
			if _, err := b.KV.Put(ctx, key, []byte("b")); err != nil {
				t.Fatal(err)
			}
		}},
		{"freed", func(key string) {
			if _, err := b.KV.Put(ctx, key, nil); err != nil {
				t.Fatal(err)
			}
		}},
		{"gone", func(key string) {
			if err := b.KV.Purge(ctx, key); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		a, err := b.Create(ctx, tc.name, []byte("a"))
		if err != nil {
			t.Fatal(err)
		}
		tc.after(tc.name)
		if err := a.Renew(ctx); !errors.Is(err, lease.ErrLost) {
			t.Errorf("%s: renewal = %v, want it lost", tc.name, err)
		}
		if a.Sure() {
			t.Errorf("%s: a lost lease is sure", tc.name)
		}
	}

	a, err := b.Create(ctx, "unanswered", []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := a.Renew(done); err == nil || errors.Is(err, lease.ErrLost) {
		t.Errorf("a renewal that got no answer = %v, want an error, not lost", err)
	}
	if !a.Sure() {
		t.Error("a lease whose renewal got no answer is not sure any more")
	}
}

// A held lease is renewed while its work runs, and the work's ctx is
// cancelled when the lease is lost.
func TestHold(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBucket(t, 5*time.Second)
	a, err := b.Create(ctx, "k", []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	first := a.Rev()
	wctx, stop := a.Hold(ctx, 20*time.Millisecond)
	natstest.WaitFor(t, 5*time.Second, func() error {
		if a.Rev() == first {
			return errors.New("not renewed")
		}
		return nil
	})
	if _, err := b.KV.Put(ctx, "k", []byte("b")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the work goes on after its lease was lost")
	}
	if err := context.Cause(wctx); !errors.Is(err, lease.ErrLost) {
		t.Errorf("cause = %v, want the lease lost", err)
	}
	if err := stop(); !errors.Is(err, lease.ErrLost) {
		t.Errorf("stop = %v, want the lease lost", err)
	}

	// Stopped while held: no renewal after, and no loss reported.
	c, err := b.Create(ctx, "c", []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop = c.Hold(ctx, 20*time.Millisecond)
	if err := stop(); err != nil {
		t.Errorf("stop of a held lease = %v", err)
	}
	if wctx.Err() == nil {
		t.Error("the work's ctx is not done after stop")
	}
	rev := c.Rev()
	time.Sleep(100 * time.Millisecond) // renewals would show meanwhile
	if e, err := b.KV.Get(ctx, "c"); err != nil {
		t.Fatal(err)
	} else if e.Revision() != rev {
		t.Errorf("renewed after stop: at revision %d, was %d", e.Revision(), rev)
	}
}

// A freed lease holds an empty value, taken with one compare-and-set on
// the revision Free returned; a deleted one is gone, even after a renewal
// whose answer was lost, and another holder's is left alone.
func TestFreeAndDelete(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBucket(t, 5*time.Second)
	a, err := b.Create(ctx, "free", []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	rev, err := a.Free(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h := holderOf(t, b, "free"); h != "" || a.Sure() {
		t.Errorf("freed lease holds %q, sure %v; want it empty, not sure", h, a.Sure())
	}
	if _, err := b.Update(ctx, "free", []byte("b"), rev); err != nil {
		t.Errorf("take a freed lease on the revision it was freed at: %v", err)
	}

	d, err := b.Create(ctx, "delete", []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.KV.Update(ctx, "delete", []byte("a"), d.Rev()); err != nil { // answer lost
		t.Fatal(err)
	}
	if err := d.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if h := holderOf(t, b, "delete"); h != "(none)" {
		t.Errorf("deleted lease holds %q", h)
	}

	o, err := b.Create(ctx, "other", []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.KV.Put(ctx, "other", []byte("b")); err != nil {
		t.Fatal(err)
	}
	if err := o.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if h := holderOf(t, b, "other"); h != "b" {
		t.Errorf("deleting a lost lease left %q, want b's kept", h)
	}
}

// A renewal with no answer gives up within a third of the lease's TTL by
// default, not after a request's usual timeout: by then the lease may be
// another's.
func TestRenewalGivesUpWithinItsPeriod(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, _, js := natstest.Run(t)
	const ttl = 3 * time.Second
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "test-leases", TTL: ttl, History: 1})
	if err != nil {
		t.Fatal(err)
	}
	b := lease.Bucket{KV: kv, TTL: ttl}
	a, err := b.Create(ctx, "k", []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	srv.Shutdown()
	start := time.Now()
	if err := a.Renew(ctx); err == nil {
		t.Fatal("renewed with the server gone")
	}
	if took := time.Since(start); took > ttl {
		t.Errorf("the renewal gave up after %v, want within %v", took, ttl/3*2)
	}
}
