package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/model"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/policy"
)

// Usage is counted once per event whoever counts it: two harnesses count
// at once, one stops, another takes over, and every key ends at the sum
// of its events.
func TestUsageCountedOnce(t *testing.T) {
	t.Parallel()
	_, _, js := natstest.Run(t)
	hs, _ := newLeaseHarnesses(t, js, 3)
	day := time.Now().UTC().Format(time.DateOnly)
	write := func(n int) {
		t.Helper()
		for i := range n {
			tenant, user := "acme", "ada"
			if i%3 == 0 {
				tenant, user = "beta", "bob"
			}
			session := uuid.Must(uuid.NewV7())
			resp := event.ModelResponded{Header: event.NewHeader(event.TypeModelResponded, tenant, session), Turn: 1,
				Model: "openai:m", Usage: model.Usage{InputTokens: 10, OutputTokens: 1}, User: user}
			record(t, js, &resp, fmt.Sprintf("%s:turn:1", session))
			res := event.ToolCompleted{Header: event.NewHeader(event.TypeToolCompleted, tenant, session), Call: uuid.Must(uuid.NewV7()),
				Name: "Bash", Service: bus.ServiceSandbox, DurationMS: 500, User: user}
			record(t, js, &res, res.Call.String()+":result")
		}
	}
	want := func(n int) map[string]policy.Usage {
		out := map[string]policy.Usage{}
		for i := range n {
			tenant, user := "acme", "ada"
			if i%3 == 0 {
				tenant, user = "beta", "bob"
			}
			for _, k := range []string{bus.UsageKey(tenant, day, ""), bus.UsageKey(tenant, day, user)} {
				u := out[k]
				u.Add(policy.Usage{Steps: 1, InputTokens: 10, OutputTokens: 1, SandboxSeconds: 0.5})
				out[k] = u
			}
		}
		return out
	}
	check := func(n int) {
		t.Helper()
		natstest.WaitFor(t, 20*time.Second, func() error {
			for k, w := range want(n) {
				e, err := hs[0].days.kv.Get(context.Background(), k)
				if err != nil {
					return fmt.Errorf("%s: %v", k, err)
				}
				var got dayUsage
				if err := json.Unmarshal(e.Value(), &got); err != nil {
					return err
				}
				w.CostUSD = got.CostUSD // priced by the policy; counted like the rest
				if got.Usage != w {
					return fmt.Errorf("%s = %+v, want %+v", k, got.Usage, w)
				}
			}
			return nil
		})
	}
	run := func(s *Service) (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.counter.run(ctx) }()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	}

	write(30)
	stopA, stopB := run(hs[0]), run(hs[1])
	check(30)
	write(30)
	check(60)
	stopA()
	stopB()
	// The lease lapses with its harnesses; a third counts what came since.
	write(30)
	stopC := run(hs[2])
	defer stopC()
	check(90)

	// Two counters over the same events at once, as when one outlived its
	// lease: each key still counts each event once. With the cursor gone,
	// the one without the lease reads every event from the log's start.
	hs[0].log = slog.New(slog.DiscardHandler)
	if err := hs[0].days.kv.Delete(context.Background(), usageCursor); err != nil {
		t.Fatal(err)
	}
	overlap := func(s *Service) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.counter.count(ctx, s.counter.leases.At(usageCounterKey, s.counter.me, 0, time.Now())); err == nil || ctx.Err() != nil {
			t.Errorf("a counter without the lease counted on: %v", err)
		}
	}
	write(30)
	overlap(hs[0])
	check(120)
}
