package sandbox

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"corral.dev/pkg/natstest"
	"corral.dev/pkg/tool"
	"github.com/google/uuid"
)

// liveSandbox returns a session's live sandbox, or nil.
func liveSandbox(d *Driver, session uuid.UUID) *box {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s := d.sessions[d.Workspace(tenant, session)]; s != nil {
		return s.box
	}
	return nil
}

// sandboxPids returns the host pids of a session's bwrap and of the
// executor it runs.
func sandboxPids(t *testing.T, d *Driver, session uuid.UUID) (bwrap, executor int) {
	t.Helper()
	b := liveSandbox(d, session)
	if b == nil {
		t.Fatal("the session has no live sandbox")
	}
	bwrap = b.cmd.Process.Pid
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		state, ppid, err := procStat(p)
		if err != nil || ppid != bwrap || state == "Z" {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		cmdline, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "cmdline"))
		if strings.Contains(string(cmdline), ExecutorArg) {
			return bwrap, pid
		}
	}
	t.Fatalf("bwrap %d has no executor child", bwrap)
	return 0, 0
}

// procStat returns the state and parent pid from a /proc/<pid>/stat file.
func procStat(path string) (state string, ppid int, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", 0, err
	}
	// The command name, in parentheses, may hold spaces: parse after it.
	_, rest, ok := strings.Cut(string(b), ") ")
	fields := strings.Fields(rest)
	if !ok || len(fields) < 2 {
		return "", 0, fmt.Errorf("%s: cannot parse %q", path, b)
	}
	ppid, err = strconv.Atoi(fields[1])
	return fields[0], ppid, err
}

// gone checks that none of pids is a live process; a zombie waiting for
// some other parent to reap it counts as gone.
func gone(pids ...int) func() error {
	return func() error {
		for _, pid := range pids {
			state, _, err := procStat(fmt.Sprintf("/proc/%d/stat", pid))
			if err == nil && state != "Z" {
				return fmt.Errorf("process %d still running (state %s)", pid, state)
			}
		}
		return nil
	}
}

// stopSandbox stops a session's sandbox the way an idle stop does.
func stopSandbox(t testing.TB, d *Driver, session uuid.UUID) {
	t.Helper()
	s, unlock := d.lockWait(d.Workspace(tenant, session))
	defer unlock()
	d.mu.Lock()
	b := s.box
	s.box = nil
	d.mu.Unlock()
	if b == nil {
		t.Fatal("the session has no live sandbox")
	}
	b.stop()
}

// Calls of a session run in one sandbox: the same bwrap and executor serve
// them all.
func TestWarmCallsReuseSandbox(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{IdleTimeout: time.Hour})
	session := uuid.New()
	bash(t, d, session, "true")
	bwrap, executor := sandboxPids(t, d, session)
	for i := range 3 {
		if res := bash(t, d, session, "echo $i"); res.IsError {
			t.Fatalf("call %d: %+v", i, res)
		}
		if b, x := sandboxPids(t, d, session); b != bwrap || x != executor {
			t.Fatalf("call %d ran in bwrap %d with executor %d, want %d and %d", i, b, x, bwrap, executor)
		}
	}
}

// An executor killed from the host takes its sandbox with it; the
// session's next call starts a new sandbox and succeeds.
func TestExecutorKilledBetweenCalls(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{IdleTimeout: time.Hour})
	session := uuid.New()
	bash(t, d, session, "echo x > kept")
	bwrap, executor := sandboxPids(t, d, session)
	if err := syscall.Kill(executor, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 5*time.Second, gone(bwrap, executor))
	res := bash(t, d, session, "cat kept")
	if res.IsError || res.Output != "x\n" {
		t.Errorf("call after the kill = %+v, want output %q", res, "x\n")
	}
	if b, _ := sandboxPids(t, d, session); b == bwrap {
		t.Errorf("the call ran in bwrap %d, which was killed", b)
	}
}

// An executor killed during a call fails that call with ErrSandboxLost;
// the next call gets a new sandbox.
func TestExecutorKilledDuringCall(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{IdleTimeout: time.Hour})
	session := uuid.New()
	marker := fmt.Sprintf("60.%d3", os.Getpid())
	bash(t, d, session, "true")
	_, executor := sandboxPids(t, d, session)
	errc := make(chan error, 1)
	go func() {
		_, err := d.Run(t.Context(), who(tenant, session), &tool.BashArgs{Command: "sleep " + marker})
		errc <- err
	}()
	natstest.WaitFor(t, 5*time.Second, func() error {
		if len(hostProcesses(t, marker)) == 0 {
			return errors.New("the command has not started")
		}
		return nil
	})
	if err := syscall.Kill(executor, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, ErrSandboxLost) {
		t.Errorf("Run whose executor was killed: got %v, want an error wrapping ErrSandboxLost", err)
	}
	natstest.WaitFor(t, 5*time.Second, noProcesses(t, marker))
	if res := bash(t, d, session, "echo ok"); res.IsError || res.Output != "ok\n" {
		t.Errorf("next call = %+v, want output %q", res, "ok\n")
	}
}

// A timeout kills every process of the call, in its process group or not,
// but not the executor: the sandbox stays warm.
func TestTimeoutSparesExecutor(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{IdleTimeout: time.Hour})
	session := uuid.New()
	bash(t, d, session, "echo x > /tmp/kept")
	bwrap, executor := sandboxPids(t, d, session)
	marker := fmt.Sprintf("60.%d4", os.Getpid())
	cmd := fmt.Sprintf("sleep %s & setsid sleep %s & (sleep %s &); echo started; sleep %s", marker, marker, marker, marker)
	res := run(t, d, session, &tool.BashArgs{Command: cmd, Timeout: 300})
	if !res.TimedOut || res.Output != "started\nCommand timed out after 300ms" {
		t.Errorf("result = %+v, want a timeout", res)
	}
	natstest.WaitFor(t, 5*time.Second, noProcesses(t, marker))
	if b, x := sandboxPids(t, d, session); b != bwrap || x != executor {
		t.Errorf("after the timeout: bwrap %d, executor %d; want %d and %d", b, x, bwrap, executor)
	}
	if res := bash(t, d, session, "cat /tmp/kept"); res.Output != "x\n" {
		t.Errorf("/tmp/kept after the timeout = %+v, want x", res)
	}
}

// What a command leaves running when it returns is killed then, whether it
// stayed in the command's process group or left it; the sandbox stays warm.
func TestOrphansKilledWhenCallReturns(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{IdleTimeout: time.Hour})
	session := uuid.New()
	marker := fmt.Sprintf("60.%d5", os.Getpid())
	res := bash(t, d, session, fmt.Sprintf("sleep %s >/dev/null 2>&1 & setsid sleep %s >/dev/null 2>&1 & (setsid sleep %s >/dev/null 2>&1 &); echo bye", marker, marker, marker))
	if res.IsError || res.Output != "bye\n" {
		t.Errorf("result = %+v, want output %q", res, "bye\n")
	}
	natstest.WaitFor(t, 5*time.Second, noProcesses(t, marker))
	if liveSandbox(d, session) == nil {
		t.Error("the sandbox stopped with the call")
	}
}

// A command cannot kill the executor, PID 1 of its sandbox, with signals.
func TestCommandsCannotKillExecutor(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{IdleTimeout: time.Hour})
	session := uuid.New()
	bash(t, d, session, "true")
	bwrap, executor := sandboxPids(t, d, session)
	// Every signal number, then everything but the shell itself.
	cmd := "for n in $(seq 1 64); do kill -s $n 1; done 2>/dev/null; kill -KILL -1 2>/dev/null; echo alive"
	if res := bash(t, d, session, cmd); res.Output != "alive\n" {
		t.Errorf("signalling pid 1: %+v, want output %q", res, "alive\n")
	}
	if res := bash(t, d, session, "echo still"); res.Output != "still\n" {
		t.Errorf("next call = %+v", res)
	}
	if b, x := sandboxPids(t, d, session); b != bwrap || x != executor {
		t.Errorf("after the signals: bwrap %d, executor %d; want %d and %d", b, x, bwrap, executor)
	}
}

// frozen checks that every thread of each of pids is stopped: it runs
// nothing until thawed.
func frozen(pids ...int) func() error {
	return func() error {
		for _, pid := range pids {
			stats, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
			if len(stats) == 0 {
				return fmt.Errorf("process %d is gone", pid)
			}
			for _, p := range stats {
				state, _, err := procStat(p)
				if err != nil {
					return err
				}
				if state != "T" {
					return fmt.Errorf("%s: state %s, not frozen", p, state)
				}
			}
		}
		return nil
	}
}

// An idle sandbox is suspended: its processes stay, stopped, and the next
// call thaws them with everything as it was, /tmp included. Suspended
// for StopTimeout, it is stopped, leaving no process behind; the next
// call starts a new one on the same workspace.
func TestIdleSandboxSuspendedThenStopped(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	starts := map[string]int{}
	d := newDriver(t, Config{IdleTimeout: 200 * time.Millisecond, StopTimeout: 1500 * time.Millisecond,
		OnStart: func(kind string, _ time.Duration) {
			mu.Lock()
			starts[kind]++
			mu.Unlock()
		}})
	if d.cgroups == nil {
		t.Skip("no pids cgroup here: idle sandboxes are stopped, not suspended (TestIdleSandboxStoppedWithoutCgroups)")
	}
	session := uuid.New()
	bash(t, d, session, "echo x > kept; echo y > /tmp/kept-while-suspended")
	bwrap, executor := sandboxPids(t, d, session)
	natstest.WaitFor(t, 5*time.Second, frozen(bwrap, executor))
	if live, suspended := d.Live(); live != 1 || suspended != 1 {
		t.Errorf("Live() = %d, %d while suspended; want 1, 1", live, suspended)
	}

	res := bash(t, d, session, "cat kept /tmp/kept-while-suspended")
	if res.IsError || res.Output != "x\ny\n" {
		t.Errorf("call after the suspension = %+v, want output %q", res, "x\ny\n")
	}
	if res.NewSandbox {
		t.Error("the call that thawed the suspended sandbox reports a new one")
	}
	if b, x := sandboxPids(t, d, session); b != bwrap || x != executor {
		t.Errorf("resumed in bwrap %d, executor %d; want the suspended %d and %d", b, x, bwrap, executor)
	}
	if err := frozen(bwrap)(); err == nil {
		t.Error("bwrap is still frozen after the call")
	}

	natstest.WaitFor(t, 10*time.Second, func() error {
		if liveSandbox(d, session) != nil {
			return errors.New("the sandbox is still live")
		}
		return gone(bwrap, executor)()
	})
	res = bash(t, d, session, "cat kept; ls -A /tmp")
	if res.IsError || res.Output != "x\n" {
		t.Errorf("call after the stop = %+v, want output %q", res, "x\n")
	}
	if !res.NewSandbox {
		t.Error("the call after the stop does not report a new sandbox")
	}
	mu.Lock()
	defer mu.Unlock()
	if want := map[string]int{StartCold: 1, StartResume: 1, StartRestart: 1}; !maps.Equal(starts, want) {
		t.Errorf("starts = %v, want %v", starts, want)
	}
}

// Past MaxSuspended, the sandbox suspended longest is stopped.
func TestMaxSuspended(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{IdleTimeout: 100 * time.Millisecond, StopTimeout: time.Hour, MaxSuspended: 1})
	if d.cgroups == nil {
		t.Skip("no pids cgroup here")
	}
	first, second := uuid.New(), uuid.New()
	bash(t, d, first, "true")
	bwrap1, executor1 := sandboxPids(t, d, first)
	natstest.WaitFor(t, 5*time.Second, frozen(bwrap1, executor1))
	bash(t, d, second, "true")
	bwrap2, executor2 := sandboxPids(t, d, second)
	natstest.WaitFor(t, 5*time.Second, frozen(bwrap2, executor2))
	natstest.WaitFor(t, 5*time.Second, gone(bwrap1, executor1))
	if liveSandbox(d, first) != nil {
		t.Error("the first session still has a sandbox")
	}
	if err := frozen(bwrap2, executor2)(); err != nil {
		t.Errorf("the second sandbox: %v", err)
	}
}

// Without cgroups an idle sandbox is stopped at once, leaving no process
// behind; the next call starts a new one on the same workspace.
func TestIdleSandboxStoppedWithoutCgroups(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{IdleTimeout: 300 * time.Millisecond})
	if d.cgroups != nil {
		d.cgroups.close()
		d.cgroups = nil // as where the manager may not make cgroups
	}
	session := uuid.New()
	bash(t, d, session, "echo x > kept; echo y > /tmp/gone")
	bwrap, executor := sandboxPids(t, d, session)
	natstest.WaitFor(t, 5*time.Second, func() error {
		if liveSandbox(d, session) != nil {
			return errors.New("the sandbox is still live")
		}
		return gone(bwrap, executor)()
	})
	res := bash(t, d, session, "cat kept; ls -A /tmp")
	if res.IsError || res.Output != "x\n" {
		t.Errorf("call after the idle stop = %+v, want output %q", res, "x\n")
	}
}

func TestDestroyAndCloseStopSandboxes(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{IdleTimeout: time.Hour})
	one, two := uuid.New(), uuid.New()
	bash(t, d, one, "true")
	bash(t, d, two, "true")
	bwrap1, executor1 := sandboxPids(t, d, one)
	bwrap2, executor2 := sandboxPids(t, d, two)

	if err := d.Destroy(t.Context(), tenant, one); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 5*time.Second, gone(bwrap1, executor1))
	if err := gone(bwrap2, executor2)(); err == nil {
		t.Error("Destroy of one session stopped the other's sandbox")
	}

	d.Close()
	natstest.WaitFor(t, 5*time.Second, gone(bwrap2, executor2))
	if _, err := d.Run(t.Context(), who(tenant, two), &tool.BashArgs{Command: "true"}); err == nil {
		t.Error("Run after Close: nil error")
	}
	d.Close()
}

// A session that only reads and writes files never gets a sandbox, nor
// does its tenant get a pool.
func TestFileToolsStartNoSandbox(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{IdleTimeout: time.Hour, PoolSize: 2})
	session := uuid.New()
	for _, args := range []any{
		&tool.WriteArgs{FilePath: "/workspace/a.txt", Content: "one\n"},
		&tool.EditArgs{FilePath: "/workspace/a.txt", OldString: "one", NewString: "two"},
		&tool.ReadArgs{FilePath: "/workspace/a.txt"},
		&tool.GlobArgs{Pattern: "*.txt"},
		&tool.GrepArgs{Pattern: "two"},
	} {
		if res := run(t, d, session, args); res.IsError {
			t.Fatalf("%T: %s", args, res.Output)
		}
	}
	if live, _ := d.Live(); live != 0 || d.Pooled() != 0 {
		t.Errorf("after file tools only: %d sandboxes live, %d pooled; want none", live, d.Pooled())
	}
	if !strings.Contains(bash(t, d, session, "cat a.txt").Output, "two") {
		t.Error("the first Bash call does not see what the file tools wrote")
	}
	if live, _ := d.Live(); live != 1 {
		t.Errorf("after a Bash call: %d sandboxes live, want 1", live)
	}
}

func TestStopEndsSandboxKeepsWorkspace(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{IdleTimeout: time.Hour})
	session := uuid.New()
	if d.Stop(tenant, session) {
		t.Error("Stop of a session without a sandbox reported one")
	}
	bash(t, d, session, "echo x > kept; echo y > /tmp/gone")
	bwrap, executor := sandboxPids(t, d, session)
	if !d.Stop(tenant, session) {
		t.Error("Stop of a live sandbox reported none")
	}
	natstest.WaitFor(t, 5*time.Second, gone(bwrap, executor))
	if live, _ := d.Live(); live != 0 {
		t.Errorf("%d sandboxes live after Stop, want 0", live)
	}
	res := bash(t, d, session, "cat kept; ls -A /tmp")
	if res.IsError || res.Output != "x\n" {
		t.Errorf("call after Stop = %+v, want output %q", res, "x\n")
	}
}

// A Bash call reports a new sandbox when its session had one on the same
// workspace that is gone (stopped, or killed), and only then: not for the
// session's first sandbox, even on a workspace a Write made, not for a
// warm call, and not for the first after Destroy, which removed the
// workspace with it.
func TestNewSandboxReported(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{IdleTimeout: time.Hour})
	session := uuid.New()
	step := func(what string, want bool, command string) {
		t.Helper()
		res := bash(t, d, session, command)
		if res.IsError {
			t.Fatalf("%s: %+v", what, res)
		}
		if res.NewSandbox != want {
			t.Errorf("%s: NewSandbox = %t, want %t", what, res.NewSandbox, want)
		}
	}
	if res := run(t, d, session, &tool.WriteArgs{FilePath: "/workspace/f", Content: "x"}); res.IsError || res.NewSandbox {
		t.Fatalf("Write: %+v", res)
	}
	step("the first sandbox", false, "cat f")
	step("a warm call", false, "echo y > /tmp/y")
	d.Stop(tenant, session)
	step("after Stop", true, "cat f")
	step("a warm call after", false, "true")
	bwrap, executor := sandboxPids(t, d, session)
	if err := syscall.Kill(executor, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 5*time.Second, gone(bwrap, executor))
	step("after the executor was killed", true, "true")
	if err := d.Destroy(t.Context(), tenant, session); err != nil {
		t.Fatal(err)
	}
	step("after Destroy", false, "true")
}

// The sandbox that prepares a workspace (a clone, with Fetch set) is no
// sandbox of the session's own: the session's first one after it, once it
// is stopped, is not reported as new; a later one after a stop is.
func TestPreparingSandboxIsNotTheSessions(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{IdleTimeout: time.Hour})
	session := uuid.New()
	id := who(tenant, session)
	id.Fetch = "https://git.example.test/app.git"
	res, err := d.Run(t.Context(), id, &tool.BashArgs{Command: "echo cloned > /workspace/f"})
	if err != nil || res.IsError || res.NewSandbox {
		t.Fatalf("the preparing sandbox's call: %+v, %v", res, err)
	}
	d.Stop(tenant, session)
	if res := bash(t, d, session, "cat f"); res.IsError || res.NewSandbox {
		t.Errorf("the session's first sandbox after the preparing one: %+v, want NewSandbox false", res)
	}
	d.Stop(tenant, session)
	if res := bash(t, d, session, "true"); res.IsError || !res.NewSandbox {
		t.Errorf("the session's sandbox after a stop: %+v, want NewSandbox true", res)
	}
}

// Started by hand outside a sandbox, the executor refuses to run: as
// anything but PID 1 its kill(-1) would reach the caller's processes.
func TestExecutorRefusesOutsideSandbox(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, ExecutorArg)
	cmd.Stdin = strings.NewReader(`{"id":1,"command":"true"}` + "\n")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "first process of a sandbox") {
		t.Errorf("executor outside a sandbox: %v, %q; want exit status 2 and a refusal", err, out)
	}
}

// Where ptrace is refused, the executor sets limits with /bin/sh's ulimit;
// run that fallback by hand inside a sandbox, with limits below the
// sandbox's own so that they show.
func TestShellFallbackLimits(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{})
	l := limits{CPU: 7, CPUHard: 12, AS: 512 << 20, FSize: 1 << 20, NoFile: 256, NProc: 100}
	command := "ulimit -St; ulimit -Ht; ulimit -v; ulimit -f; ulimit -n; ulimit -u; echo $BASH_VERSION | grep -q . && echo bash"
	var quoted []string
	for _, arg := range shellArgs(l, "/bin/bash", command) {
		quoted = append(quoted, "'"+strings.ReplaceAll(arg, "'", `'\''`)+"'")
	}
	res := bash(t, d, uuid.New(), strings.Join(quoted, " "))
	if want := "7\n12\n524288\n1024\n256\n100\nbash\n"; res.Output != want {
		t.Errorf("limits under the fallback = %q, want %q", res.Output, want)
	}
}

// helperDirEnv names the data directory of the manager that
// TestSandboxDiesWithManager runs in a child process.
const helperDirEnv = "CORRAL_SANDBOX_TEST_MANAGER_DIR"

// helperMarkerEnv is how long the helper's last call sleeps, which marks it.
const helperMarkerEnv = "CORRAL_SANDBOX_TEST_MANAGER_SLEEP"

// TestHelperManager is the manager process of TestSandboxDiesWithManager:
// it starts a sandbox, ends some OS threads, checks the sandbox survived
// that, prints the pids of bwrap and the executor, and runs a long call
// until it is killed.
func TestHelperManager(t *testing.T) {
	dir := os.Getenv(helperDirEnv)
	if dir == "" {
		t.Skip("run by TestSandboxDiesWithManager")
	}
	d := newDriver(t, Config{Dir: dir, IdleTimeout: time.Hour})
	session := uuid.New()
	bash(t, d, session, "true")
	bwrap, executor := sandboxPids(t, d, session)
	// A goroutine that ends locked to its thread ends the thread too. Had
	// bwrap been forked from such a thread, its parent-death signal would
	// fire now.
	for range 8 {
		done := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			close(done)
		}()
		<-done
	}
	bash(t, d, session, "true")
	if b, x := sandboxPids(t, d, session); b != bwrap || x != executor {
		t.Fatalf("the sandbox changed from %d/%d to %d/%d", bwrap, executor, b, x)
	}
	fmt.Printf("pids %d %d\n", bwrap, executor)
	// Busy, the executor does not notice its stdin closing when we die.
	_, _ = d.Run(t.Context(), who(tenant, session), &tool.BashArgs{Command: "sleep " + os.Getenv(helperMarkerEnv)})
	t.Fatal("the call returned")
}

// A sandbox dies with its manager, however the manager dies.
func TestSandboxDiesWithManager(t *testing.T) {
	t.Parallel()
	newDriver(t, Config{}) // skips where bwrap cannot run
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestHelperManager$", "-test.timeout=1m")
	marker := fmt.Sprintf("60.%d6", os.Getpid())
	cmd.Env = append(os.Environ(), helperDirEnv+"="+t.TempDir(), helperMarkerEnv+"="+marker)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	var bwrap, executor int
	if _, err := fmt.Fscanf(stdout, "pids %d %d\n", &bwrap, &executor); err != nil {
		t.Fatalf("read the helper's pids: %v", err)
	}
	natstest.WaitFor(t, 5*time.Second, func() error {
		if len(hostProcesses(t, marker)) == 0 {
			return errors.New("the helper's call has not started")
		}
		return nil
	})
	if err := gone(bwrap)(); err == nil {
		t.Fatalf("bwrap %d is not running", bwrap)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 5*time.Second, gone(bwrap, executor))
	natstest.WaitFor(t, 5*time.Second, noProcesses(t, marker))
}
