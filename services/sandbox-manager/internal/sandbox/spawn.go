package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// executor runs commands inside a sandbox, as PID 1 of its PID namespace.
// It is not safe for concurrent use.
type executor struct {
	shell string // /bin/bash, or /bin/sh where the sandbox has no bash
	env   []string
	// ptrace is whether commands are started traced, so their rlimits can
	// be set before they run. It turns false for good if the kernel refuses
	// (Yama ptrace_scope 2 or 3, a seccomp filter, an LSM), and commands then
	// start under /bin/sh, which sets the limits with ulimit.
	ptrace bool
	// hard holds the executor's own hard limits, which its children inherit
	// and cannot raise: a configured limit above one is lowered to it.
	hard map[int]uint64
	null *os.File // stdin of every command
}

// rlimitResources are the limits set on every command, in the order of
// [limits]' fields.
var rlimitResources = []int{unix.RLIMIT_CPU, unix.RLIMIT_AS, unix.RLIMIT_FSIZE, unix.RLIMIT_NOFILE, unix.RLIMIT_NPROC}

func newExecutor() (*executor, error) {
	null, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	x := &executor{shell: "/bin/sh", env: os.Environ(), ptrace: true, hard: make(map[int]uint64), null: null}
	if unix.Access("/bin/bash", unix.X_OK) == nil {
		x.shell = "/bin/bash"
	}
	for _, res := range rlimitResources {
		var lim unix.Rlimit
		if err := unix.Getrlimit(res, &lim); err != nil {
			return nil, fmt.Errorf("getrlimit %d: %w", res, err)
		}
		x.hard[res] = lim.Max
	}
	return x, nil
}

// run runs one command and reports how it ended. The command leads a
// process group of its own. At the timeout, every process in the sandbox
// but the executor is killed: the command's group and anything that left
// it (setsid, double forks). When the command exits, whatever it left
// running is killed the same way, so a call never outlives itself. Either
// way run returns once all of them are reaped and the output pipe has
// closed.
func (x *executor) run(req request) response {
	resp := response{ID: req.ID}
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		resp.Error = fmt.Sprintf("output pipe: %v", err)
		return resp
	}
	pid, err := x.start(req, p[1])
	syscall.Close(p[1])
	if err != nil {
		syscall.Close(p[0])
		resp.Error = err.Error()
		return resp
	}
	out := newCappedBuffer(req.OutputLimit)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		drain(p[0], out)
	}()

	var timedOut atomic.Bool
	timer := time.AfterFunc(time.Duration(req.TimeoutMS)*time.Millisecond, func() {
		timedOut.Store(true)
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		killOthers()
	})
	status := reapAll(pid)
	timer.Stop()
	<-copied
	syscall.Close(p[0])

	resp.ExitCode = exitCode(status)
	resp.TimedOut = timedOut.Load()
	resp.Output, resp.Omitted = out.buf, out.omitted
	return resp
}

// errPtraceRefused reports that the kernel would not let a command be
// traced.
var errPtraceRefused = errors.New("ptrace refused")

// start starts the command with its rlimits in place and its stdout and
// stderr on out.
func (x *executor) start(req request, out int) (int, error) {
	if x.ptrace {
		pid, err := x.startTraced(req, out)
		if !errors.Is(err, errPtraceRefused) {
			return pid, err
		}
		x.ptrace = false
	}
	return x.forkExec("/bin/sh", shellArgs(req.Limits, x.shell, req.Command), out, false)
}

// startTraced starts the command traced, sets its rlimits and lets it go.
// Go cannot run code in a child between fork and exec, so this is how the
// limits are in place before the command can fork: a tracee that has
// exec'd stops before its first instruction, with SIGTRAP. The limits are
// set while it is on its way to that stop, so that usually the stop has
// happened when wait looks and no one sleeps. ptrace requests must come
// from the thread that started the tracee, hence the locked thread.
func (x *executor) startTraced(req request, out int) (int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pid, err := x.forkExec(x.shell, []string{x.shell, "-c", req.Command}, out, true)
	if errors.Is(err, syscall.EPERM) {
		// PTRACE_TRACEME failed (or exec did, which the fallback reports).
		return 0, fmt.Errorf("%w: %w", errPtraceRefused, err)
	}
	if err != nil {
		return 0, err
	}
	limErr := x.setLimits(pid, req.Limits)
	var ws syscall.WaitStatus
	for {
		_, err = syscall.Wait4(pid, &ws, syscall.WALL, nil)
		if err != syscall.EINTR {
			break
		}
	}
	switch {
	case err != nil:
		err = fmt.Errorf("wait for %s to start: %w", x.shell, err)
	case !ws.Stopped():
		// Killed from outside before its first instruction; reaped.
		return 0, fmt.Errorf("%s ended before it started (status %#x)", x.shell, ws)
	case limErr != nil:
		err = limErr
	default:
		err = syscall.PtraceDetach(pid)
	}
	if err != nil {
		// It has not run a user instruction: kill it and reap it.
		_ = syscall.Kill(pid, syscall.SIGKILL)
		_, _ = syscall.Wait4(pid, &ws, syscall.WALL, nil)
		return 0, err
	}
	return pid, nil
}

// forkExec starts argv in a process group of its own, with stdin on
// /dev/null and stdout and stderr on out. No other descriptor is passed:
// everything the executor opens is close-on-exec.
func (x *executor) forkExec(path string, argv []string, out int, traced bool) (int, error) {
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Env:   x.env,
		Files: []uintptr{x.null.Fd(), uintptr(out), uintptr(out)},
		Sys:   &syscall.SysProcAttr{Setpgid: true, Ptrace: traced},
	})
	if err != nil {
		return 0, fmt.Errorf("start %s: %w", path, err)
	}
	return pid, nil
}

// setLimits sets the rlimits of process pid, each lowered to the
// executor's own hard limit if that is lower.
func (x *executor) setLimits(pid int, l limits) error {
	want := [][2]uint64{{l.CPU, l.CPUHard}, {l.AS, l.AS}, {l.FSize, l.FSize}, {l.NoFile, l.NoFile}, {l.NProc, l.NProc}}
	for i, res := range rlimitResources {
		hard := min(want[i][1], x.hard[res])
		lim := unix.Rlimit{Cur: min(want[i][0], hard), Max: hard}
		if err := unix.Prlimit(pid, res, &lim, nil); err != nil {
			return fmt.Errorf("prlimit %d: %w", res, err)
		}
	}
	return nil
}

// reapAll reaps children until none is left and returns the status of
// main. Once main has exited it kills every other process in the sandbox,
// again after each reap in case one was being forked at the time. As PID 1
// the executor inherits every orphan, so when wait reports no children,
// nothing of the call is left.
func reapAll(main int) syscall.WaitStatus {
	var status syscall.WaitStatus
	mainDone := false
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WALL, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return status // ECHILD: all gone
		}
		if pid == main && (ws.Exited() || ws.Signaled()) {
			status, mainDone = ws, true
		}
		if mainDone {
			killOthers()
		}
	}
}

// drain reads fd to EOF into w. EOF comes when every process holding the
// write end has closed it or died.
func drain(fd int, w io.Writer) {
	buf := make([]byte, 32<<10)
	for {
		n, err := syscall.Read(fd, buf)
		if err == syscall.EINTR {
			continue
		}
		if n <= 0 {
			return
		}
		_, _ = w.Write(buf[:n])
	}
}

// killOthers kills every process of the PID namespace but the executor:
// kill(-1) spares the caller and PID 1, which are the same process here.
func killOthers() {
	_ = syscall.Kill(-1, syscall.SIGKILL)
}

// exitCode is the shell's view of a status: the exit code, or 128+n for
// death by signal n.
func exitCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// shellArgs returns the command line that runs command with shell once
// /bin/sh has applied the limits. It is the fallback where ptrace is not
// allowed: one exec more per call.
//
// /bin/sh is dash on Debian and bash in POSIX mode elsewhere. Both take -v
// in KiB and -f in 512-byte blocks (bash outside POSIX mode would use
// 1024-byte blocks for -f). The process limit is -u in bash but -p in dash,
// where -u is an error; in bash -p is the read-only pipe size, so try one
// then the other. Failing to set the other limits fails the call rather
// than running unconfined.
func shellArgs(l limits, shell, command string) []string {
	script := fmt.Sprintf(`ulimit -S -t %d && ulimit -H -t %d && ulimit -v %d && ulimit -f %d && ulimit -n %d || exit 126
{ ulimit -u %d || ulimit -p %d; } 2>/dev/null
exec %s -c "$1"`,
		l.CPU, l.CPUHard, l.AS/1024, l.FSize/512, l.NoFile, l.NProc, l.NProc, shell)
	return []string{"/bin/sh", "-c", script, "sh", command}
}
