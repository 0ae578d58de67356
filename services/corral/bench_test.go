package main

import (
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
	"corral.dev/services/harness"
	sandboxmanager "corral.dev/services/sandbox-manager"
)

// inproc runs a harness and a sandbox-manager in this process against an
// embedded server, with a fake model running script.
func inproc(b *testing.B, script modeltest.Script) jetstream.JetStream {
	b.Helper()
	_, _, js := natstest.Run(b)
	fake := modeltest.New(b, script)
	data := b.TempDir()
	getenv := func(k string) string {
		return map[string]string{
			"OPENAI_BASE_URL": fake.URL(), "OPENAI_API_KEY": "k", "CORRAL_MODEL": "openai:bench",
			"CORRAL_DATA_DIR": data, "CORRAL_SHUTDOWN_GRACE": "1s",
		}[k]
	}
	hcfg, err := harness.LoadConfig(getenv)
	if err != nil {
		b.Fatal(err)
	}
	scfg, err := sandboxmanager.LoadConfig(getenv)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.DiscardHandler)
	h, err := harness.New(ctx, hcfg, js, log)
	if err != nil {
		b.Fatal(err)
	}
	sm, err := sandboxmanager.New(ctx, scfg, js, log)
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = h.Run(ctx) }()
	go func() { defer wg.Done(); _ = sm.Run(ctx) }()
	b.Cleanup(func() { cancel(); wg.Wait() })
	return js
}

// startSession publishes a request and returns a channel closed when the
// session completes.
func startSession(b *testing.B, js jetstream.JetStream, tenant string) (uuid.UUID, <-chan struct{}) {
	b.Helper()
	ctx := context.Background()
	session := uuid.Must(uuid.NewV7())
	done := make(chan struct{})
	cons, err := js.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.EventSubject(tenant, session, event.TypeSessionCompleted)},
	})
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		if _, err := cons.Next(jetstream.FetchMaxWait(10 * time.Minute)); err == nil {
			close(done)
		}
	}()
	req := event.Request{Header: event.NewHeader(event.TypeRequest, tenant, session), User: "bench", Prompt: "go"}
	if err := bus.Publish(ctx, js, bus.RequestSubject(tenant, session), req.ID.String(), &req); err != nil {
		b.Fatal(err)
	}
	return session, done
}

// percentiles reports the p50 and p99 of ds in milliseconds.
func percentiles(b *testing.B, ds []time.Duration, prefix string) (p50, p99 float64) {
	b.Helper()
	if len(ds) == 0 {
		return 0, 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	p50, p99 = ms(ds[len(ds)/2]), ms(ds[min(len(ds)-1, len(ds)*99/100)])
	b.ReportMetric(p50, prefix+"p50-ms")
	b.ReportMetric(p99, prefix+"p99-ms")
	return p50, p99
}

// BenchmarkToolCallRoundTrip measures one durable tool call: the harness
// records the model's response and dispatches the call, the sandbox-manager
// runs `true` in the session's warm sandbox and records the result, and the
// harness folds it in and asks the model for the next turn. Each op is the
// time from one model request to the next; the fake model answers at once.
func BenchmarkToolCallRoundTrip(b *testing.B) {
	var mu sync.Mutex
	var stamps []time.Time
	turns := b.N + 1 // the first call cold-starts the sandbox; it is not counted
	js := inproc(b, func(c modeltest.Conversation) (modeltest.Turn, error) {
		mu.Lock()
		stamps = append(stamps, time.Now())
		mu.Unlock()
		if modeltest.Turns(c) < turns {
			return modeltest.Turn{Calls: []modeltest.Call{{Name: "Bash", Input: map[string]any{"command": "true"}}}}, nil
		}
		return modeltest.Turn{Text: "done"}, nil
	})
	b.ResetTimer()
	_, done := startSession(b, js, "bench")
	<-done
	b.StopTimer()
	var ds []time.Duration
	for i := 2; i < len(stamps); i++ {
		ds = append(ds, stamps[i].Sub(stamps[i-1]))
	}
	percentiles(b, ds, "")
}

// BenchmarkThroughput runs 64 sessions at once whose model asks for a Read
// per turn (a call that runs no process) and answers instantly, and reports
// tool calls per second.
func BenchmarkThroughput(b *testing.B) {
	const sessions = 64
	perSession := max(b.N/sessions, 1)
	js := inproc(b, func(c modeltest.Conversation) (modeltest.Turn, error) {
		if modeltest.Turns(c) < perSession {
			return modeltest.Turn{Calls: []modeltest.Call{{Name: "Glob", Input: map[string]any{"pattern": "*"}}}}, nil
		}
		return modeltest.Turn{Text: "done"}, nil
	})
	b.ResetTimer()
	start := time.Now()
	var dones []<-chan struct{}
	for range sessions {
		_, done := startSession(b, js, "bench")
		dones = append(dones, done)
	}
	for _, d := range dones {
		<-d
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(sessions*perSession)/elapsed.Seconds(), "calls/s")
}

// BenchmarkJetStreamRoundTrip is the bare baseline: publish a message to a
// work-queue stream and wait for its ack, then fetch it from a durable pull
// consumer and ack it, waiting for the server to confirm.
func BenchmarkJetStreamRoundTrip(b *testing.B) {
	_, _, js := natstest.Run(b)
	ctx := context.Background()
	cons, err := js.CreateOrUpdateConsumer(ctx, bus.StreamTools, jetstream.ConsumerConfig{
		Durable: "bench", AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: "tools.bench.>",
	})
	if err != nil {
		b.Fatal(err)
	}
	ds := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		if _, err := js.Publish(ctx, "tools.bench.x", []byte(`{}`), jetstream.WithMsgID(fmt.Sprint(i))); err != nil {
			b.Fatal(err)
		}
		msg, err := cons.Next()
		if err != nil {
			b.Fatal(err)
		}
		if err := msg.DoubleAck(ctx); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
	}
	b.StopTimer()
	percentiles(b, ds, "")
}

// BenchmarkForkExecTrue is the bare baseline of running a process.
func BenchmarkForkExecTrue(b *testing.B) {
	path, err := exec.LookPath("true")
	if err != nil {
		b.Skip("no true")
	}
	ds := make([]time.Duration, 0, b.N)
	for range b.N {
		t0 := time.Now()
		cmd := exec.Command(path)
		cmd.Env = []string{}
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
	}
	b.StopTimer()
	percentiles(b, ds, "")
}
