package sandbox

import (
	"os/exec"
	"slices"
	"testing"
	"time"

	"corral.dev/pkg/tool"
	"github.com/google/uuid"
)

// The benchmarks time one thing per iteration and report the median and
// the 99th percentile beside the mean, so that one run compares a bare
// fork-exec, a bare bwrap, a warm call and a cold start (and so that the
// numbers are from the same machine under the same load):
//
//	go test -run '^$' -bench . ./internal/sandbox

// percentiles reports the p50 and p99 of ds in milliseconds.
func percentiles(b *testing.B, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	at := func(q float64) float64 {
		return float64(ds[min(len(ds)-1, int(q*float64(len(ds))))]) / float64(time.Millisecond)
	}
	b.ReportMetric(at(0.50), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
}

// BenchmarkForkExecTrue is the floor: os/exec running /bin/true.
func BenchmarkForkExecTrue(b *testing.B) {
	var ds []time.Duration
	for b.Loop() {
		start := time.Now()
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
	}
	percentiles(b, ds)
}

// BenchmarkForkExecBash is the floor of a Bash call: os/exec running
// bash -c true with the sandbox's environment, outside any sandbox.
func BenchmarkForkExecBash(b *testing.B) {
	var env []string
	for _, kv := range sandboxEnv {
		env = append(env, kv[0]+"="+kv[1])
	}
	var ds []time.Duration
	for b.Loop() {
		start := time.Now()
		cmd := exec.Command("/bin/bash", "-c", "true")
		cmd.Env = env
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
	}
	percentiles(b, ds)
}

// BenchmarkBwrapTrue is a one-shot sandbox: bwrap with our options running
// /bin/true, which is what every Bash call cost before the executor.
func BenchmarkBwrapTrue(b *testing.B) {
	d := newDriver(b, Config{})
	args := append(d.sandboxArgs(d.cfg.Dir, ""), "--", "/bin/true")
	var ds []time.Duration
	for b.Loop() {
		start := time.Now()
		cmd := exec.Command(d.bwrap, args...)
		cmd.Env = []string{}
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("bwrap: %v: %s", err, out)
		}
		ds = append(ds, time.Since(start))
	}
	percentiles(b, ds)
}

// BenchmarkWarmCall is Driver.Run of Bash `true` in a session whose
// sandbox is already up.
func BenchmarkWarmCall(b *testing.B) {
	d := newDriver(b, Config{IdleTimeout: time.Hour})
	session := uuid.New()
	args := &tool.BashArgs{Command: "true"}
	if _, err := d.Run(b.Context(), tenant, session, args); err != nil {
		b.Fatal(err)
	}
	var ds []time.Duration
	for b.Loop() {
		start := time.Now()
		res, err := d.Run(b.Context(), tenant, session, args)
		if err != nil || res.IsError {
			b.Fatalf("Run = %+v, %v", res, err)
		}
		ds = append(ds, time.Since(start))
	}
	percentiles(b, ds)
}

// BenchmarkColdStart is the first call of a new session: starting bwrap
// and the executor, then running Bash `true`. Destroying the session after
// each iteration is not timed.
func BenchmarkColdStart(b *testing.B) {
	d := newDriver(b, Config{IdleTimeout: time.Hour})
	args := &tool.BashArgs{Command: "true"}
	var ds []time.Duration
	for b.Loop() {
		session := uuid.New()
		start := time.Now()
		res, err := d.Run(b.Context(), tenant, session, args)
		if err != nil || res.IsError {
			b.Fatalf("Run = %+v, %v", res, err)
		}
		ds = append(ds, time.Since(start))
		b.StopTimer()
		if err := d.Destroy(tenant, session); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	percentiles(b, ds)
}
