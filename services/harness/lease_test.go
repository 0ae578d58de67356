package harness

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/natstest"
)

// One harness at a time holds a session's lease; a released lease is free
// for any harness, and the one that released it takes it back.
func TestLeaseIsExclusiveAndPassesOn(t *testing.T) {
	t.Parallel()
	_, _, js := natstest.Run(t)
	ctx := context.Background()
	newHarness := func() *Service {
		cfg, err := LoadConfig(func(string) string { return "" })
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(ctx, cfg, js, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b := newHarness(), newHarness()
	session := uuid.Must(uuid.NewV7())
	holder := func() string {
		e, err := a.leases.Get(ctx, session.String())
		if err != nil {
			t.Fatal(err)
		}
		return string(e.Value())
	}

	_, releaseA, err := a.acquireLease(ctx, session)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.acquireLease(ctx, session); !errors.Is(err, bus.ErrNotYet) {
		t.Fatalf("b took a lease a holds: %v", err)
	}
	releaseA()
	if h := holder(); h != "" {
		t.Fatalf("released lease holds %q, want it free", h)
	}
	_, releaseB, err := b.acquireLease(ctx, session)
	if err != nil {
		t.Fatalf("b cannot take a released lease: %v", err)
	}
	if h := holder(); h != b.cfg.Instance {
		t.Fatalf("lease holds %q, want b", h)
	}
	if _, _, err := a.acquireLease(ctx, session); !errors.Is(err, bus.ErrNotYet) {
		t.Fatalf("a took back a lease b holds (its remembered revision is stale): %v", err)
	}
	releaseB()
	for range 3 { // a takes it back, and again from its own release
		_, releaseA, err = a.acquireLease(ctx, session)
		if err != nil {
			t.Fatal(err)
		}
		if h := holder(); h != a.cfg.Instance {
			t.Fatalf("lease holds %q, want a", h)
		}
		releaseA()
	}
}
