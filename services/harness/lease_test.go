package harness

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
)

// newLeaseHarnesses returns n harnesses on js, whose leases are what is
// tested, and a function returning who holds a session's lease, and at
// which revision.
func newLeaseHarnesses(t *testing.T, js jetstream.JetStream, n int) ([]*Service, func(uuid.UUID) (string, uint64)) {
	t.Helper()
	var hs []*Service
	for range n {
		cfg, err := LoadConfig(func(k string) string { return map[string]string{"CORRAL_CALL_SIGNING_KEY": testCallKey}[k] })
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(context.Background(), cfg, js, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, s)
	}
	return hs, func(session uuid.UUID) (string, uint64) {
		t.Helper()
		e, err := hs[0].leases.KV.Get(context.Background(), bus.SessionKey("acme", session))
		if err != nil {
			t.Fatal(err)
		}
		return string(e.Value()), e.Revision()
	}
}

// One harness at a time holds a session's lease; a released lease is free
// for any harness, and the one that released it takes it back.
func TestLeaseIsExclusiveAndPassesOn(t *testing.T) {
	t.Parallel()
	_, _, js := natstest.Run(t)
	ctx := context.Background()
	hs, lookup := newLeaseHarnesses(t, js, 2)
	a, b := hs[0], hs[1]
	serveLeases(t, a, b)
	session := uuid.Must(uuid.NewV7())
	holder := func() string {
		h, _ := lookup(session)
		return h
	}

	_, releaseA, _, err := a.acquireLease(ctx, "acme", session)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := b.acquireLease(ctx, "acme", session); !errors.Is(err, bus.ErrNotYet) {
		t.Fatalf("b took a lease a holds: %v", err)
	}
	releaseA(false)
	if h := holder(); h != "" {
		t.Fatalf("released lease holds %q, want it free", h)
	}
	_, releaseB, _, err := b.acquireLease(ctx, "acme", session)
	if err != nil {
		t.Fatalf("b cannot take a released lease: %v", err)
	}
	if h := holder(); h != b.cfg.Instance {
		t.Fatalf("lease holds %q, want b", h)
	}
	if _, _, _, err := a.acquireLease(ctx, "acme", session); !errors.Is(err, bus.ErrNotYet) {
		t.Fatalf("a took back a lease b holds (its remembered revision is stale): %v", err)
	}
	releaseB(false)
	for range 3 { // a takes it back, and again from its own release
		_, releaseA, _, err = a.acquireLease(ctx, "acme", session)
		if err != nil {
			t.Fatal(err)
		}
		if h := holder(); h != a.cfg.Instance {
			t.Fatalf("lease holds %q, want a", h)
		}
		releaseA(false)
	}
}

// serveLeases runs each harness's answering of lease requests, as a
// running harness does, until the test ends.
func serveLeases(t *testing.T, hs ...*Service) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, len(hs))
	for _, h := range hs {
		sub, err := h.answerLeaseRequests(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
		go func() { served <- h.serveLeases(ctx) }()
	}
	t.Cleanup(func() {
		cancel()
		for range hs {
			if err := <-served; err != nil {
				t.Error(err)
			}
		}
	})
}

// A lease whose holder is gone (no harness of its name answers on the
// server) is taken at once, long before it expires.
func TestLeaseOfAGoneHarness(t *testing.T) {
	t.Parallel()
	_, _, js := natstest.Run(t)
	ctx := context.Background()
	hs, holder := newLeaseHarnesses(t, js, 2)
	a, b := hs[0], hs[1]
	serveLeases(t, b) // a holds a lease and then dies: it answers nothing
	session := uuid.Must(uuid.NewV7())
	if _, _, _, err := a.acquireLease(ctx, "acme", session); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, release, owned, err := b.acquireLease(ctx, "acme", session)
	if err != nil {
		t.Fatalf("b cannot take the lease of a harness that is gone: %v", err)
	}
	defer release(false)
	if took := time.Since(start); took > bus.LeaseTTL/2 {
		t.Errorf("took %v to take the lease, want it at once", took)
	}
	if owned {
		t.Error("b took a's lease and says it was its own all along")
	}
	if who, _ := holder(session); who != b.cfg.Instance {
		t.Errorf("lease holds %q, want b", who)
	}
}

// A lease released to linger stays with its harness, and the session's
// next step there takes it without writing it. Another harness asking for
// it gets it at once, unless a step holds it; one that is not asked for is
// freed once it is no longer surely valid.
func TestLeaseLingers(t *testing.T) {
	t.Parallel()
	_, _, js := natstest.Run(t)
	ctx := context.Background()
	hs, holder := newLeaseHarnesses(t, js, 2)
	a, b := hs[0], hs[1]
	serveLeases(t, a)

	session := uuid.Must(uuid.NewV7())
	_, release, _, err := a.acquireLease(ctx, "acme", session)
	if err != nil {
		t.Fatal(err)
	}
	release(true)
	who, rev := holder(session)
	if who != a.cfg.Instance {
		t.Fatalf("a lingering lease holds %q, want a", who)
	}
	_, release, owned, err := a.acquireLease(ctx, "acme", session)
	if err != nil || !owned {
		t.Fatalf("taken again from lingering: owned %v, %v", owned, err)
	}
	if who, again := holder(session); who != a.cfg.Instance || again != rev {
		t.Errorf("taken again from lingering: %q at revision %d, want a at %d (not written)", who, again, rev)
	}

	// Lingering, but a step of the session runs at a (and will take it
	// again): b is told to come back.
	release(true)
	unlock, err := a.sessions.Lock(ctx, bus.SessionKey("acme", session))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := b.acquireLease(ctx, "acme", session); !errors.Is(err, bus.ErrNotYet) {
		t.Fatalf("b took a lease while a step of a ran: %v", err)
	}
	unlock()
	// Lingering: b asks for it and gets it.
	_, releaseB, owned, err := b.acquireLease(ctx, "acme", session)
	if err != nil {
		t.Fatalf("b cannot take a lease lingering at a: %v", err)
	}
	if owned {
		t.Error("b took a's lease and says it was its own all along")
	}
	if who, _ := holder(session); who != b.cfg.Instance {
		t.Fatalf("lease holds %q, want b", who)
	}
	releaseB(false)

	// Not asked for: freed by a's keeper within half the lease's TTL.
	other := uuid.Must(uuid.NewV7())
	_, release, _, err = a.acquireLease(ctx, "acme", other)
	if err != nil {
		t.Fatal(err)
	}
	release(true)
	start := time.Now()
	natstest.WaitFor(t, bus.LeaseTTL, func() error {
		if who, _ := holder(other); who != "" {
			return fmt.Errorf("lease held by %q %v after its step", who, time.Since(start))
		}
		return nil
	})
	if took := time.Since(start); took < bus.LeaseTTL/2-bus.LeaseTTL/5 {
		t.Errorf("a lingering lease was freed after %v, before it had to be", took)
	}
}

// A lingering lease is not taken again unwritten once the harness's
// connection went down meanwhile: another harness may have taken it then,
// for a dead one's, when no one answered on its lease subject.
func TestLingeringLeaseAfterAReconnect(t *testing.T) {
	t.Parallel()
	_, _, js := natstest.Run(t)
	ctx := context.Background()
	hs, holder := newLeaseHarnesses(t, js, 1)
	a := hs[0]
	session := uuid.Must(uuid.NewV7())
	_, release, _, err := a.acquireLease(ctx, "acme", session)
	if err != nil {
		t.Fatal(err)
	}
	release(true)
	_, rev := holder(session)
	before := a.reconnects()
	if err := js.Conn().ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 5*time.Second, func() error {
		if a.reconnects() == before || !js.Conn().IsConnected() {
			return errors.New("not reconnected yet")
		}
		return nil
	})
	_, release, owned, err := a.acquireLease(ctx, "acme", session)
	if err != nil || !owned {
		t.Fatalf("taken again after a reconnect: owned %v, %v", owned, err)
	}
	defer release(false)
	if who, again := holder(session); who != a.cfg.Instance || again == rev {
		t.Errorf("taken again after a reconnect: %q at revision %d, want a written anew (not at %d)", who, again, rev)
	}
}

// A harness that is stopping still answers for the leases of the steps it
// lets finish: another harness does not take them for a dead one's.
func TestStoppingHarnessKeepsItsLeases(t *testing.T) {
	_, _, js := natstest.Run(t)
	fake := modeltest.New(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
		return modeltest.Turn{Text: "done"}, nil
	})
	asked, release := make(chan struct{}, 1), make(chan struct{})
	model := blockingModel(t, fake.URL(), func([]byte) bool { return true }, asked, release)
	cfg, err := LoadConfig(func(k string) string {
		return map[string]string{"OPENAI_BASE_URL": model, "OPENAI_API_KEY": "k", "CORRAL_MODEL": "openai:m", "CORRAL_CALL_SIGNING_KEY": testCallKey, "CORRAL_SHUTDOWN_GRACE": "10s"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(context.Background(), cfg, js, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	session := uuid.Must(uuid.NewV7())
	request(t, js, session, "go")
	<-asked // a's step holds the lease, waiting for the model
	stop()
	hs, _ := newLeaseHarnesses(t, js, 1)
	if _, _, _, err := hs[0].acquireLease(context.Background(), "acme", session); !errors.Is(err, bus.ErrNotYet) {
		t.Errorf("another harness took the lease of a step a stopping harness lets finish: %v", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
