// Package metrics serves a service's Prometheus metrics at /metrics and its
// health at /healthz.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"corral.dev/pkg/tool"
)

// NewRegistry returns a registry holding the Go runtime's and the
// process's collectors, for a service's own to join.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Handler serves /metrics from g and /healthz from healthy: 200 "ok", or
// 503 with what is wrong.
func Handler(g prometheus.Gatherer, healthy func() error) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := healthy(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// Serve serves [Handler] on addr until ctx is done.
func Serve(ctx context.Context, addr string, g prometheus.Gatherer, healthy func() error, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	srv := &http.Server{Handler: Handler(g, healthy), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.InfoContext(ctx, "metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Connected reports whether every one of conns is connected to NATS: a
// service that cannot reach the bus is not healthy.
func Connected(conns ...*nats.Conn) func() error {
	return func() error {
		for _, nc := range conns {
			if s := nc.Status(); s != nats.CONNECTED {
				return fmt.Errorf("nats connection %q is %s", nc.Opts.Name, s)
			}
		}
		return nil
	}
}

// Seconds are the buckets of latencies, from 0.5 ms to about 2 min.
var Seconds = prometheus.ExponentialBuckets(0.0005, 2.5, 14)

// With runs fn and, when addr is not empty, serves g and healthy on addr
// alongside until fn returns.
func With(ctx context.Context, addr string, g prometheus.Gatherer, healthy func() error, log *slog.Logger, fn func(context.Context) error) error {
	if addr == "" {
		return fn(ctx)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, addr, g, healthy, log) }()
	err := fn(ctx)
	cancel()
	return errors.Join(err, <-served)
}

// Other is the label value of anything outside a label's closed set.
const Other = "other"

// OneOf returns v when it is one of set, and [Other] when it is not. A
// label's values must come from a closed set: each value is a series
// Prometheus keeps, so one taken from what a model or a client sends would
// let them make series without end.
func OneOf(v string, set ...string) string {
	for _, s := range set {
		if v == s {
			return v
		}
	}
	return Other
}

// Tool returns the label value of the tool a model called: its name if it
// is one of the tools the model sees ([tool.Names]), and [Other] if not.
func Tool(name string) string { return OneOf(name, tool.Names()...) }
