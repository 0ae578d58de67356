package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/sessionlog"
)

// BenchmarkStop measures the kill switch: from `corral stop`'s event being
// recorded to the killed call's result in the log, while the session's
// Bash call sleeps. The baseline, BenchmarkKillProcess, kills a sleeping
// process started directly and waits for it.
func BenchmarkStop(b *testing.B) {
	js := inproc(b, func(c modeltest.Conversation) (modeltest.Turn, error) {
		return modeltest.Turn{Calls: []modeltest.Call{{Name: "Bash", Input: map[string]any{"command": "sleep 600"}}}}, nil
	})
	ctx := context.Background()
	var ds []time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		session := uuid.Must(uuid.NewV7())
		req := event.Request{Header: event.NewHeader(event.TypeRequest, "bench", session), User: "bench", Prompt: "sleep"}
		if err := bus.Publish(ctx, js, bus.RequestSubject("bench", session, req.User), req.ID.String(), &req); err != nil {
			b.Fatal(err)
		}
		// Wait until the call is out (with its response), and give it
		// time to start.
		waitEvent(b, js, session, event.TypeModelResponded)
		time.Sleep(200 * time.Millisecond)
		b.StartTimer()
		stopped := time.Now()
		// A stop is a request of the session's user, which the harness
		// records.
		ev := event.SessionStopped{Header: event.NewHeader(event.TypeSessionStopped, "bench", session), By: "bench"}
		if err := bus.Publish(ctx, js, bus.RequestSubject("bench", session, req.User), ev.ID.String(), &ev); err != nil {
			b.Fatal(err)
		}
		data := waitEvent(b, js, session, event.TypeToolCompleted)
		ds = append(ds, time.Since(stopped))
		b.StopTimer()
		var r event.ToolCompleted
		if err := json.Unmarshal(data, &r); err != nil {
			b.Fatal(err)
		}
		if !r.IsError || r.DurationMS > 60_000 {
			b.Fatalf("the call was not killed: %+v", r)
		}
		b.StartTimer()
	}
	b.StopTimer()
	percentiles(b, ds, "killed-")
}

// waitEvent returns the first event of type typ in the session's log,
// waiting for it.
func waitEvent(b *testing.B, js jetstream.JetStream, session uuid.UUID, typ string) []byte {
	b.Helper()
	cons, err := js.OrderedConsumer(context.Background(), bus.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{sessionlog.SessionKind("bench", session, typ)},
		InactiveThreshold: time.Second,
	})
	if err != nil {
		b.Fatal(err)
	}
	msg, err := cons.Next(jetstream.FetchMaxWait(30 * time.Second))
	if err != nil {
		b.Fatalf("wait for %s: %v", typ, err)
	}
	return msg.Data()
}

func BenchmarkKillProcess(b *testing.B) {
	var ds []time.Duration
	for range b.N {
		b.StopTimer()
		cmd := exec.Command("sleep", "600")
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		ds = append(ds, time.Since(start))
	}
	b.StopTimer()
	percentiles(b, ds, "killed-")
}
