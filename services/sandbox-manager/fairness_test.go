package sandboxmanager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/sessionlog"
)

// blocking is a command that runs until the test releases it: it marks
// its start in the workspace, then waits there for a file named go.
const blocking = `{"command":"touch started; while [ ! -e go ]; do sleep 0.02; done; echo released"}`

// started reports whether a blocking call of a session of tenant began on
// svc.
func started(svc *Service, tenant string, session uuid.UUID) bool {
	_, err := os.Stat(filepath.Join(svc.driver.Workspace(tenant, session), "started"))
	return err == nil
}

// release lets the blocking call of a session of tenant on svc end.
func release(t *testing.T, svc *Service, tenant string, session uuid.UUID) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(svc.driver.Workspace(tenant, session), "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// resultSeqs returns the stream sequence of each result recorded for a
// session of tenant, in order.
func resultSeqs(t *testing.T, js jetstream.JetStream, tenant string, session uuid.UUID) []uint64 {
	t.Helper()
	entries, _, err := sessionlog.New(js, sessionlog.Options{Reader: "test"}).ReadAll(context.Background(), tenant, session)
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for _, e := range entries {
		if _, ok := e.Event.(*event.ToolCompleted); ok {
			out = append(out, e.Seq)
		}
	}
	return out
}

// One tenant's session floods the queue with calls that run one after
// another; another tenant's call, queued behind them all, does not wait
// for them: it completes before the flood's last call starts (the flood's
// calls run one at a time, so its last starts once the one before it has
// recorded its result).
func TestFloodDoesNotHoldBackAnotherTenant(t *testing.T) {
	_, _, js := natstest.Run(t)
	startNode(t, js, map[string]string{"CORRAL_SANDBOX_CONCURRENCY": "2"})
	flood, victim := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	const calls = 10
	for i := range calls {
		dispatchIn(t, js, "flood", flood, uuid.Must(uuid.NewV7()), "Bash", `{"command":"sleep 0.3; echo x >> lines; wc -l < lines"}`, fmt.Sprintf("flood-%d", i))
	}
	dispatchIn(t, js, "acme", victim, uuid.Must(uuid.NewV7()), "Bash", `{"command":"echo hi"}`, "victim")
	resultsIn(t, js, "acme", victim, 1)
	rs := resultsIn(t, js, "flood", flood, calls)
	for i, r := range rs {
		if want := fmt.Sprint(i + 1); r.IsError || r.Output != want+"\n" {
			t.Errorf("flood result %d = %q (error %v), want %s: its calls ran out of order or at once", i, r.Output, r.IsError, want)
		}
	}
	v, f := resultSeqs(t, js, "acme", victim)[0], resultSeqs(t, js, "flood", flood)
	if v > f[calls-2] {
		t.Errorf("the other tenant's call completed at seq %d, after the flood's call %d (seq %d): it waited for the flood", v, calls-1, f[calls-2])
	}
}

// A turn of more calls than a node has pending room for, behind a long
// one, leaves the room to others: at most maxSessionWaiting of a session's
// calls wait on a node, and the rest are answered at once with an error
// result saying the node is busy with them. Another tenant's call runs
// while the long one still does, and the calls kept run once it ends.
func TestLongTurnLeavesPendingRoom(t *testing.T) {
	_, _, js := natstest.Run(t)
	svc, _ := startNode(t, js, map[string]string{"CORRAL_SANDBOX_CONCURRENCY": "2"})
	flood, victim := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	dispatchIn(t, js, "flood", flood, uuid.Must(uuid.NewV7()), "Bash", blocking, "flood-0")
	natstest.WaitFor(t, 30*time.Second, func() error {
		if !started(svc, "flood", flood) {
			return fmt.Errorf("the flood's first call has not started")
		}
		return nil
	})
	n := maxWaiting(2) + 16 // more than the node may hold pending
	for i := 1; i < n; i++ {
		dispatchIn(t, js, "flood", flood, uuid.Must(uuid.NewV7()), "Bash", `{"command":"echo ran"}`, fmt.Sprintf("flood-%d", i))
	}
	dispatchIn(t, js, "acme", victim, uuid.Must(uuid.NewV7()), "Bash", `{"command":"echo hi"}`, "victim")
	resultsIn(t, js, "acme", victim, 1)
	busy := n - 1 - maxSessionWaiting
	natstest.WaitFor(t, 30*time.Second, func() error {
		got := 0
		for _, r := range results(t, js, "flood", flood) {
			if r.IsError && strings.Contains(r.Output, "busy") {
				got++
			}
		}
		if got != busy {
			return fmt.Errorf("%d calls answered busy, want %d", got, busy)
		}
		return nil
	})
	release(t, svc, "flood", flood)
	rs := resultsIn(t, js, "flood", flood, n)
	ran := 0
	for _, r := range rs {
		if !r.IsError && r.Output == "ran\n" {
			ran++
		}
	}
	if ran != maxSessionWaiting {
		t.Errorf("%d of the calls kept ran, want %d", ran, maxSessionWaiting)
	}
}

// A node that forwards a call to the node its session is placed on holds
// no slot while the owner runs it: with one slot, it runs another
// tenant's call meanwhile.
func TestForwardingHoldsNoSlot(t *testing.T) {
	_, _, js := natstest.Run(t)
	ctx, cancel := context.WithCancel(context.Background())
	// a serves forwarded calls but takes none from the queue.
	a := newNode(t, js, nil)
	served := make(chan error, 1)
	go func() { served <- a.serveForwarded(ctx) }()
	go a.place.keepAlive(ctx)
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Error(err)
		}
		a.driver.Close()
	})
	session, other := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	places, err := js.KeyValue(ctx, bus.BucketPlacements)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := places.Create(ctx, bus.PlacementKey("acme", session), []byte(a.cfg.Node)); err != nil {
		t.Fatal(err)
	}
	startNode(t, js, map[string]string{"CORRAL_SANDBOX_CONCURRENCY": "1"})
	dispatch(t, js, session, uuid.Must(uuid.NewV7()), "Bash", blocking, "forwarded")
	natstest.WaitFor(t, 15*time.Second, func() error {
		if !started(a, "acme", session) {
			return errors.New("the forwarded call has not started on its owner")
		}
		return nil
	})
	dispatchIn(t, js, "beta", other, uuid.Must(uuid.NewV7()), "Bash", `{"command":"echo hi"}`, "other")
	resultsIn(t, js, "beta", other, 1)
	if rs := results(t, js, "acme", session); len(rs) != 0 {
		t.Fatalf("the forwarded call has a result already: %+v", rs)
	}
	release(t, a, "acme", session)
	if r := resultsOf(t, js, session, 1)[0]; r.Output != "released\n" {
		t.Errorf("forwarded call's result = %q, want released", r.Output)
	}
}

// One tenant runs at most CORRAL_SANDBOX_TENANT_CONCURRENCY calls at once
// on a node: with as many of its calls waiting as the node has slots,
// another tenant's call still runs.
func TestTenantConcurrencyIsBounded(t *testing.T) {
	_, _, js := natstest.Run(t)
	svc, _ := startNode(t, js, map[string]string{"CORRAL_SANDBOX_CONCURRENCY": "4", "CORRAL_SANDBOX_TENANT_CONCURRENCY": "2"})
	var busy []uuid.UUID
	for i := range 4 {
		s := uuid.Must(uuid.NewV7())
		busy = append(busy, s)
		dispatchIn(t, js, "busy", s, uuid.Must(uuid.NewV7()), "Bash", blocking, fmt.Sprintf("busy-%d", i))
	}
	count := func() int {
		n := 0
		for _, s := range busy {
			if started(svc, "busy", s) {
				n++
			}
		}
		return n
	}
	natstest.WaitFor(t, 15*time.Second, func() error {
		if n := count(); n < 2 {
			return fmt.Errorf("%d of the tenant's calls started, want 2", n)
		}
		return nil
	})
	victim := uuid.Must(uuid.NewV7())
	dispatchIn(t, js, "acme", victim, uuid.Must(uuid.NewV7()), "Bash", `{"command":"echo hi"}`, "victim")
	resultsIn(t, js, "acme", victim, 1)
	if n := count(); n != 2 {
		t.Errorf("%d of the tenant's calls started at once, want 2", n)
	}
	// Released as they start, the others run too.
	natstest.WaitFor(t, 30*time.Second, func() error {
		done := 0
		for _, s := range busy {
			if started(svc, "busy", s) {
				release(t, svc, "busy", s)
			}
			done += len(results(t, js, "busy", s))
		}
		if done < len(busy) {
			return fmt.Errorf("%d of %d calls done", done, len(busy))
		}
		return nil
	})
}

func TestTenantConcurrencySetting(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		concurrency, tenant string
		want                int // 0: an error naming the setting
	}{
		{"", "", 8},
		{"2", "", 1},
		{"10", "", 3},
		{"10", "10", 10},
		{"10", "11", 0},
		{"10", "0", 0},
		{"10", "x", 0},
	}
	for _, tc := range tests {
		cfg, err := LoadConfig(func(k string) string {
			return map[string]string{"CORRAL_DATA_DIR": dir, "CORRAL_CALL_PUBLIC_KEY": event.EncodeKey(callPub),
				"CORRAL_SANDBOX_CONCURRENCY": tc.concurrency, "CORRAL_SANDBOX_TENANT_CONCURRENCY": tc.tenant}[k]
		})
		switch {
		case tc.want == 0 && (err == nil || !strings.Contains(err.Error(), "CORRAL_SANDBOX_TENANT_CONCURRENCY")):
			t.Errorf("%s/%s: err = %v, want one naming the setting", tc.concurrency, tc.tenant, err)
		case tc.want != 0 && (err != nil || cfg.TenantConcurrency != tc.want):
			t.Errorf("%s/%s: %d, %v; want %d", tc.concurrency, tc.tenant, cfg.TenantConcurrency, err, tc.want)
		}
	}
}
