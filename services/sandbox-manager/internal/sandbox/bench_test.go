package sandbox

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"

	"corral.dev/pkg/tool"
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
	for _, kv := range sandboxEnv(presentDirs(toolchainDirs)) {
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
	args := append(d.sandboxArgs(d.cfg.Dir, "", "", layerMount{}), "--", "/bin/true")
	var ds []time.Duration
	for b.Loop() {
		start := time.Now()
		cmd := exec.Command(d.bwrap, args...)
		cmd.Env = []string{}
		filter, w, err := os.Pipe()
		if err != nil {
			b.Fatal(err)
		}
		w.Write(d.seccomp)
		w.Close()
		cmd.ExtraFiles = []*os.File{filter}
		out, err := cmd.CombinedOutput()
		filter.Close()
		if err != nil {
			b.Fatalf("bwrap: %v: %s", err, out)
		}
		ds = append(ds, time.Since(start))
	}
	percentiles(b, ds)
}

// BenchmarkWarmCall is Driver.Run of Bash `true` in a session whose
// sandbox is up and has waited a moment since its last call, as it always
// does while the model takes its turn: the call's shell was started ahead
// in that time.
func BenchmarkWarmCall(b *testing.B) {
	warmCalls(b, 10*time.Millisecond)
}

// BenchmarkWarmCallBackToBack is Driver.Run of Bash `true` in a session
// whose sandbox is up, each call sent as soon as the one before returned,
// while the sandbox may still be starting its shell.
func BenchmarkWarmCallBackToBack(b *testing.B) {
	warmCalls(b, 0)
}

func warmCalls(b *testing.B, pause time.Duration) {
	d := newDriver(b, Config{IdleTimeout: time.Hour})
	session := uuid.New()
	args := &tool.BashArgs{Command: "true"}
	if _, err := d.Run(b.Context(), who(tenant, session), args); err != nil {
		b.Fatal(err)
	}
	var ds []time.Duration
	for b.Loop() {
		time.Sleep(pause)
		ds = append(ds, timedRun(b, d, tenant, session, args))
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
		ds = append(ds, timedRun(b, d, tenant, session, args))
		b.StopTimer()
		if err := d.Destroy(b.Context(), tenant, session); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	percentiles(b, ds)
}

// BenchmarkResumeSuspended is the first call after a suspension: thawing the
// sandbox's frozen processes, then running Bash `true` in it. Freezing it
// before each iteration is not timed.
func BenchmarkResumeSuspended(b *testing.B) {
	d := newDriver(b, Config{IdleTimeout: time.Hour})
	if d.cgroups == nil {
		b.Skip("no pids cgroup here: idle sandboxes are stopped, and resuming one is a cold start")
	}
	session := uuid.New()
	args := &tool.BashArgs{Command: "true"}
	if _, err := d.Run(b.Context(), who(tenant, session), args); err != nil {
		b.Fatal(err)
	}
	var ds []time.Duration
	for b.Loop() {
		b.StopTimer()
		if err := liveSandbox(d, session).freeze(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		ds = append(ds, timedRun(b, d, tenant, session, args))
	}
	percentiles(b, ds)
}

// BenchmarkThaw is resuming a suspended sandbox, its processes let go on,
// without a call: what a resume adds to the call that needs it.
// Suspending it before each iteration is not timed.
func BenchmarkThaw(b *testing.B) {
	d := newDriver(b, Config{IdleTimeout: time.Hour})
	if d.cgroups == nil {
		b.Skip("no pids cgroup here")
	}
	session := uuid.New()
	if _, err := d.Run(b.Context(), who(tenant, session), &tool.BashArgs{Command: "true"}); err != nil {
		b.Fatal(err)
	}
	box := liveSandbox(d, session)
	var ds []time.Duration
	for b.Loop() {
		b.StopTimer()
		if err := box.freeze(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		if err := box.thaw(); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
	}
	percentiles(b, ds)
}

// BenchmarkSuspendedMemory is what a suspended sandbox holds: the
// proportional set size of its frozen processes (bwrap and the executor),
// which bounds how many one node keeps suspended before it stops them
// (Config.MaxSuspended).
func BenchmarkSuspendedMemory(b *testing.B) {
	d := newDriver(b, Config{IdleTimeout: time.Hour})
	if d.cgroups == nil {
		b.Skip("no pids cgroup here")
	}
	args := &tool.BashArgs{Command: "true"}
	var kib int64
	var n int
	for b.Loop() {
		session := uuid.New()
		if _, err := d.Run(b.Context(), who(tenant, session), args); err != nil {
			b.Fatal(err)
		}
		box := liveSandbox(d, session)
		if err := box.freeze(); err != nil {
			b.Fatal(err)
		}
		procs, err := os.ReadFile(filepath.Join(box.cgroup.dir(), "cgroup.procs"))
		if err != nil {
			b.Fatal(err)
		}
		for _, pid := range strings.Fields(string(procs)) {
			kib += pss(b, pid)
		}
		n++
	}
	b.ReportMetric(float64(kib)/float64(n), "KiB/suspended")
}

// pss reads a process's proportional set size in KiB.
func pss(b *testing.B, pid string) int64 {
	data, err := os.ReadFile("/proc/" + pid + "/smaps_rollup")
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "Pss:" {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	b.Fatalf("no Pss in /proc/%s/smaps_rollup", pid)
	return 0
}

// BenchmarkIdleSessions fills one node with idle sessions, b.N of them:
// each gets a cold start and a call that writes a file, then its sandbox
// is stopped as an idle one is. It then checks that no process of any of
// them is left, and that a sample resumes with its file, and reports how
// many the node holds and what each costs on disk.
//
//	go test -run '^$' -bench IdleSessions -benchtime 10000x ./internal/sandbox
func BenchmarkIdleSessions(b *testing.B) {
	d := newDriver(b, Config{IdleTimeout: time.Hour})
	var sessions []uuid.UUID
	for b.Loop() {
		session := uuid.New()
		res, err := d.Run(b.Context(), who(tenant, session), &tool.BashArgs{Command: "echo " + session.String() + " > id"})
		if err != nil || res.IsError {
			b.Fatalf("Run = %+v, %v", res, err)
		}
		stopSandbox(b, d, session)
		sessions = append(sessions, session)
	}
	b.StopTimer()
	live, _ := d.Live()
	// bwrap's command line names the sandbox's directory; its executor dies
	// with it.
	executors := hostProcessCount(d.cfg.Dir)
	if live != 0 || executors != 0 {
		b.Fatalf("%d sandboxes still live, %d executors running", live, executors)
	}
	dirs, _ := filepath.Glob(filepath.Join(d.cfg.Dir, tenant, "*"))
	if len(dirs) != len(sessions) {
		b.Fatalf("%d workspaces for %d sessions", len(dirs), len(sessions))
	}
	for i := 0; i < len(sessions); i += max(1, len(sessions)/10) {
		res, err := d.Run(b.Context(), who(tenant, sessions[i]), &tool.BashArgs{Command: "cat id"})
		if err != nil || strings.TrimSpace(res.Output) != sessions[i].String() {
			b.Fatalf("resume of session %d = %+v, %v", i, res, err)
		}
	}
	var used int64
	for _, dir := range dirs {
		var s unix.Stat_t
		_ = filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
			if err == nil && unix.Lstat(p, &s) == nil {
				used += s.Blocks * 512
			}
			return nil
		})
	}
	b.ReportMetric(float64(len(sessions)), "idle-sessions")
	b.ReportMetric(float64(executors), "processes")
	b.ReportMetric(float64(used)/float64(len(sessions))/1024, "disk-KiB/session")
}

// hostProcessCount counts the host's processes whose command line holds
// marker.
func hostProcessCount(marker string) int {
	n := 0
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range cmdlines {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), marker) {
			n++
		}
	}
	return n
}

// BenchmarkColdStartPooled is BenchmarkColdStart with a pool of one
// sandbox started ahead, as a node has when sessions arrive slower than it
// refills the pool: waiting for the refill before each iteration is not
// timed.
func BenchmarkColdStartPooled(b *testing.B) {
	d := newDriver(b, Config{IdleTimeout: time.Hour, PoolSize: 1})
	args := &tool.BashArgs{Command: "true"}
	if _, err := d.Run(b.Context(), who(tenant, uuid.New()), args); err != nil {
		b.Fatal(err)
	}
	var ds []time.Duration
	for b.Loop() {
		b.StopTimer()
		for d.Pooled() < 1 {
			time.Sleep(time.Millisecond)
		}
		session := uuid.New()
		b.StartTimer()
		ds = append(ds, timedRun(b, d, tenant, session, args))
		b.StopTimer()
		if err := d.Destroy(b.Context(), tenant, session); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	percentiles(b, ds)
}

// timedRun runs a call of args in session's sandbox and returns how long
// it took, failing the benchmark if the call fails.
func timedRun(b *testing.B, d *Driver, tenant string, session uuid.UUID, args any) time.Duration {
	b.Helper()
	start := time.Now()
	res, err := d.Run(b.Context(), who(tenant, session), args)
	if err != nil || res.IsError {
		b.Fatalf("Run = %+v, %v", res, err)
	}
	return time.Since(start)
}
