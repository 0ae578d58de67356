package main

import (
	"bytes"
	"context"
	"errors"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
)

// seenWriter is a command's output that notes when want is first
// written, and closes ready once then is.
type seenWriter struct {
	mu          sync.Mutex
	want, then  []byte
	seen        chan time.Time
	ready       chan struct{}
	done, began bool
	all         bytes.Buffer
}

func (w *seenWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done && bytes.Contains(p, w.want) {
		w.done = true
		w.seen <- time.Now()
	}
	if !w.began && bytes.Contains(p, w.then) {
		w.began = true
		close(w.ready)
	}
	return w.all.Write(p)
}

func (w *seenWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.all.String()
}

// BenchmarkLiveText measures how long the model's text takes to show as
// it streams. run: from the fake provider's first streamed text delta,
// flushed (Turn.OnFirstDelta), to that text written on `corral run`'s
// output, the model holding the rest of its answer until then: the
// harness's client reads it, publishes it on the session's live subject,
// and the server carries it to the client's account, where run shows it.
// Each op is one session of one turn, the model answering once run shows
// the session's request (a real model's first byte comes long after the
// client is set up). nats, the baseline: a core NATS
// message from one connection to another's handler on an embedded server,
// the least any of it could take.
func BenchmarkLiveText(b *testing.B) {
	b.Run("nats", func(b *testing.B) {
		srv, pub, _ := natstest.Run(b)
		nc, err := nats.Connect(srv.ClientURL())
		if err != nil {
			b.Fatal(err)
		}
		defer nc.Close()
		heard := make(chan time.Time, 1)
		if _, err := nc.Subscribe("live.bench.x", func(*nats.Msg) { heard <- time.Now() }); err != nil {
			b.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			b.Fatal(err)
		}
		ds := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			at := time.Now()
			if err := pub.Publish("live.bench.x", []byte(`{"kind":"text","turn":1,"attempt":1,"seq":1,"text":"the benchmark's "}`)); err != nil {
				b.Fatal(err)
			}
			ds = append(ds, (<-heard).Sub(at))
		}
		quantiles(b, ds)
	})
	b.Run("run", func(b *testing.B) {
		// following is closed once the run of the op shows its session's
		// request: only then does the model answer, as a model's first
		// byte comes long after a client is set up.
		var mu sync.Mutex
		var first chan time.Time
		var hold, following chan struct{}
		p := startDev(b, func(c modeltest.Conversation) (modeltest.Turn, error) {
			mu.Lock()
			f, h, ready := first, hold, following
			mu.Unlock()
			select {
			case <-ready:
			case <-time.After(30 * time.Second):
				return modeltest.Turn{}, errors.New("corral run did not show the request")
			}
			return modeltest.Turn{Text: "the benchmark's answer, held after its first piece", Hold: h,
				OnFirstDelta: func() { f <- time.Now() }}, nil
		}, map[string]string{
			// Each run's consumer lingers a few seconds after it ends.
			"CORRAL_AUTH_MAX_CONSUMERS": "100000",
		})
		ds := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			mu.Lock()
			first, hold, following = make(chan time.Time, 1), make(chan struct{}), make(chan struct{})
			f, h, ready := first, hold, following
			mu.Unlock()
			out := &seenWriter{want: []byte(modelPrefix + "the benchmark's"), seen: make(chan time.Time, 1),
				then: []byte("· request from"), ready: ready}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			code := make(chan int, 1)
			go func() {
				code <- run(ctx, []string{"run", "--nats", p.url, "--tenant", "bench", "--user", "bench", "go"}, p.getenv, &bytes.Buffer{}, out)
			}()
			var at, shown time.Time
			select {
			case at = <-f:
			case c := <-code:
				b.Fatalf("corral run exited %d before the model answered:\n%s", c, out.String())
			}
			select {
			case shown = <-out.seen:
			case <-time.After(30 * time.Second):
				b.Fatal("the text was not shown within 30s")
			}
			close(h)
			if c := <-code; c != 0 {
				b.Fatalf("corral run exited %d:\n%s", c, out.String())
			}
			cancel()
			ds = append(ds, max(shown.Sub(at), 0))
		}
		quantiles(b, ds)
	})
}

// quantiles reports the p50, p95 and p99 of ds in milliseconds.
func quantiles(b *testing.B, ds []time.Duration) {
	b.Helper()
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	q := func(p int) float64 { return float64(ds[min(len(ds)-1, len(ds)*p/100)]) / float64(time.Millisecond) }
	b.ReportMetric(q(50), "p50-ms")
	b.ReportMetric(q(95), "p95-ms")
	b.ReportMetric(q(99), "p99-ms")
}
