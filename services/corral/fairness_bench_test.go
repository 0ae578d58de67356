package main

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/tool"
)

// floodCalls is how many `sleep 2` calls one flooding turn queues.
const floodCalls = 40

// BenchmarkFairness measures one tenant's `echo` call, published on the
// sandbox queue, to its recorded result, in a session whose sandbox is
// warm: idle, on an idle platform; and flood, right after another tenant
// queued a turn of floodCalls `sleep 2` calls in a new session of its own
// (one turn more each op, so the flooding tenant has as many sessions
// running as ops so far, bounded by CORRAL_SANDBOX_TENANT_CONCURRENCY).
// One sandbox-manager at its default concurrency (32).
func BenchmarkFairness(b *testing.B) {
	_, js, getenv := benchPlatform(b, func(modeltest.Conversation) (modeltest.Turn, error) {
		return modeltest.Turn{Text: "unused"}, nil
	})
	runServices(b, js, getenv, false)
	key, err := event.DecodePrivateKey(getenv("CORRAL_CALL_SIGNING_KEY"))
	if err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	publish := func(tenant string, session uuid.UUID, command string) uuid.UUID {
		input, _ := json.Marshal(map[string]string{"command": command})
		c := event.ToolCall{Header: event.NewHeader(event.TypeToolCall, tenant, session), Call: uuid.Must(uuid.NewV7()), Turn: 1, User: "ada", Name: tool.Bash, Input: input}
		c.Sign(key, bus.ServiceSandbox)
		if err := bus.Publish(ctx, js, bus.ToolSubject(bus.ServiceSandbox, tenant, session), c.Call.String(), &c); err != nil {
			b.Fatal(err)
		}
		return c.Call
	}
	const tenant = "victim"
	session := uuid.Must(uuid.NewV7())
	results := toolResults(ctx, js, "bench-fairness", tenant, session)
	call := func() time.Duration {
		start := time.Now()
		id := publish(tenant, session, "echo hi")
		m := <-results
		took := time.Since(start)
		var r event.ToolCompleted
		if err := json.Unmarshal(m.Data, &r); err != nil || r.Call != id || r.IsError || r.Output != "hi\n" {
			b.Fatalf("result of %s: %s (%v)", id, m.Data, err)
		}
		return took
	}
	call() // starts the sandbox
	measure := func(b *testing.B, flood bool) {
		ds := make([]time.Duration, 0, b.N)
		for range b.N {
			b.StopTimer()
			time.Sleep(10 * time.Millisecond)
			if flood {
				s := uuid.Must(uuid.NewV7())
				for range floodCalls {
					publish("flood", s, "sleep 2")
				}
			}
			b.StartTimer()
			ds = append(ds, call())
		}
		b.StopTimer()
		percentiles(b, ds, "")
	}
	b.Run("idle", func(b *testing.B) { measure(b, false) })
	b.Run(fmt.Sprintf("flood%dx2s", floodCalls), func(b *testing.B) { measure(b, true) })
}
