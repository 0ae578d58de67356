package lock

import (
	"context"
	"testing"
	"time"
)

func wantAdmitted(t *testing.T, name string, tk *Ticket, want bool) {
	t.Helper()
	if got := tk.Admitted(); got != want {
		t.Errorf("%s admitted = %v, want %v", name, got, want)
	}
}

// Work of a busy key waits without a slot: work of other keys behind it
// goes on, and the key's own work follows in the order it entered.
func TestGateKeyWaitsWithoutASlot(t *testing.T) {
	g := &Gate{Size: 2}
	a1, a2, a3 := g.Enter("a", ""), g.Enter("a", ""), g.Enter("a", "")
	b := g.Enter("b", "")
	wantAdmitted(t, "a1", a1, true)
	wantAdmitted(t, "a2", a2, false)
	wantAdmitted(t, "b", b, true)
	c := g.Enter("c", "")
	wantAdmitted(t, "c", c, false) // both slots taken
	a1.Done()
	// a1's slot goes to the first waiting that may run: a2 (its key is
	// free now), not c, which entered later.
	wantAdmitted(t, "a2", a2, true)
	wantAdmitted(t, "a3", a3, false)
	wantAdmitted(t, "c", c, false)
	b.Done()
	wantAdmitted(t, "c", c, true)
	a2.Done()
	wantAdmitted(t, "a3", a3, true)
	a3.Done()
	c.Done()
	if g.running != 0 || len(g.keys) != 0 || len(g.waiting) != 0 {
		t.Errorf("left behind: running %d, keys %v, waiting %d", g.running, g.keys, len(g.waiting))
	}
}

// A group has at most PerGroup admitted; the others wait for it without
// a slot.
func TestGateGroupBound(t *testing.T) {
	g := &Gate{Size: 4, PerGroup: 2}
	x1, x2, x3 := g.Enter("x1", "x"), g.Enter("x2", "x"), g.Enter("x3", "x")
	y := g.Enter("y", "y")
	wantAdmitted(t, "x1", x1, true)
	wantAdmitted(t, "x2", x2, true)
	wantAdmitted(t, "x3", x3, false)
	wantAdmitted(t, "y", y, true)
	if err := x3.Queued(context.Background()); err != nil {
		t.Errorf("Queued of work held by its group: %v", err)
	}
	x1.Done()
	wantAdmitted(t, "x3", x3, true)
	for _, tk := range []*Ticket{x2, x3, y} {
		tk.Done()
	}
	if len(g.groups) != 0 {
		t.Errorf("groups left behind: %v", g.groups)
	}
}

// Yielded work keeps its key but gives back its slot and group.
func TestGateYield(t *testing.T) {
	g := &Gate{Size: 1, PerGroup: 1}
	a := g.Enter("a", "x")
	a2 := g.Enter("a", "x")
	b := g.Enter("b", "x")
	wantAdmitted(t, "b", b, false)
	a.Yield()
	wantAdmitted(t, "a2", a2, false) // a holds its key still
	wantAdmitted(t, "b", b, true)
	b.Done()
	a.Done()
	wantAdmitted(t, "a2", a2, true)
	a2.Done()
	if g.running != 0 || len(g.keys)+len(g.groups) != 0 {
		t.Errorf("left behind: running %d, keys %v, groups %v", g.running, g.keys, g.groups)
	}
}

// Work that gives up waiting leaves the queue; Queued waits while work
// that could run has no slot.
func TestGateWaitCancelAndQueued(t *testing.T) {
	g := &Gate{Size: 1}
	a := g.Enter("a", "")
	b, c := g.Enter("b", ""), g.Enter("c", "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := b.Queued(ctx); err == nil {
		t.Error("Queued returned while b waited for a slot")
	}
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	if err := b.Wait(ctx); err == nil {
		t.Error("Wait with a done ctx returned nil")
	}
	a.Done()
	wantAdmitted(t, "c", c, true)
	if err := c.Wait(context.Background()); err != nil {
		t.Error(err)
	}
	c.Done()
	if g.Waiting() != 0 || g.running != 0 {
		t.Errorf("left behind: waiting %d, running %d", g.Waiting(), g.running)
	}
}

// Work that gives up waiting just as it is admitted gives back what it
// was admitted to: the next work of its key still gets in.
func TestGiveUpWhileAdmitted(t *testing.T) {
	for i := range 200000 {
		var g Gate
		g.Size = 1
		a := g.Enter("k", "")
		if err := a.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		b := g.Enter("k", "")
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		go a.Done() // admits b, maybe while b gives up
		if err := b.Wait(ctx); err == nil {
			b.Done()
		} // else b is done, as Wait says
		c := g.Enter("k", "")
		wctx, wcancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Wait(wctx)
		wcancel()
		if err != nil {
			t.Fatalf("round %d: the next work of the key waits for good: %v", i, err)
		}
		c.Done()
	}
}
