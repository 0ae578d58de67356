package sandbox

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// executor runs commands inside a sandbox, as PID 1 of its PID namespace.
// It is not safe for concurrent use.
//
// Where the sandbox has bash, each call's shell is started ahead, while
// the sandbox waits for the call, and waits in turn for its command (see
// [bootstrap]): the call's limits are set on it, and it evaluates the
// command, so that a call costs no process start. Elsewhere each call
// starts /bin/sh, which applies the limits and execs the shell.
type executor struct {
	shell string // /bin/bash, or /bin/sh where the sandbox has no bash
	env   []string
	// hard holds the executor's own hard limits, which its children inherit
	// and cannot raise: a configured limit above one is lowered to it.
	hard map[int]uint64
	null *os.File // stdin of every command
	// next is the shell started for the next call, nil if none is.
	next *waiting
}

// waiting is a shell started ahead, waiting for its call.
type waiting struct {
	pid int
	// out is the read end of the pipe the shell's stdout and stderr go to;
	// call is the memory file that holds the command (the shell's fd 3),
	// written once the call comes, and start is the write end of the pipe
	// the shell waits on (its fd 4).
	out   int
	call  int
	start int
}

// rlimitResources are the limits set on every command, in the order of
// [limits]' fields.
var rlimitResources = []int{unix.RLIMIT_CPU, unix.RLIMIT_AS, unix.RLIMIT_FSIZE, unix.RLIMIT_NOFILE, unix.RLIMIT_NPROC}

func newExecutor() (*executor, error) {
	null, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	x := &executor{shell: "/bin/sh", env: os.Environ(), hard: make(map[int]uint64), null: null}
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
// closed. Meanwhile, if req asks for it, the output goes to w in partial
// messages as it is written; nothing else writes to w until run returns.
func (x *executor) run(req request, w io.Writer) response {
	resp := response{ID: req.ID}
	pid, out, err := x.start(req)
	if err != nil {
		resp.Error = err.Error()
		return resp
	}
	buf := newCappedBuffer(req.OutputLimit)
	var live *liveWriter
	if req.Live > 0 {
		live = newLiveWriter(w, req.ID, req.Live)
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		drain(out, buf, live)
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
	syscall.Close(out)

	resp.ExitCode = exitCode(status)
	resp.TimedOut = timedOut.Load()
	resp.Output, resp.Omitted = buf.buf, buf.omitted
	return resp
}

// start starts req's command with its limits in place, and returns its
// pid and the read end of its output.
func (x *executor) start(req request) (pid, out int, err error) {
	if x.shell != "/bin/bash" {
		return x.startShell(req)
	}
	for attempt := 0; ; attempt++ {
		w := x.next
		x.next = nil
		if w == nil {
			if w, err = x.startAhead(); err != nil {
				return 0, 0, err
			}
		}
		err := w.give(x.effective(req.Limits), req.Command)
		if err == nil {
			return w.pid, w.out, nil
		}
		// The shell is gone (killed while it waited, say): reap it, and
		// start another once.
		w.discard()
		if attempt > 0 {
			return 0, 0, fmt.Errorf("start %s: %w", x.shell, err)
		}
	}
}

// prepare starts the next call's shell, unless one waits already. A
// failure is left for the call to meet.
func (x *executor) prepare() {
	if x.shell == "/bin/bash" && x.next == nil {
		x.next, _ = x.startAhead()
	}
}

// bootstrap is the script of a shell started ahead. It waits for a line
// on fd 4, then reads the command from fd 3, closes both, and evaluates
// the command as bash -c would, its variable unset. By then the executor
// has set its limits. mapfile reads fd 3, a memory file, a buffer at a
// time, where read would take a byte at a time. It is one line, so that
// the command's lines are numbered from 1 in bash's messages, as under
// bash -c.
const bootstrap = `read -r <&4 || exit 126; mapfile -d '' c <&3; exec 3<&- 4<&-; unset REPLY; eval "unset c; ${c[0]}"`

// startAhead starts a shell that waits for its call, in a process group
// of its own, with stdin on /dev/null and stdout and stderr on a new pipe.
func (x *executor) startAhead() (*waiting, error) {
	call, err := unix.MemfdCreate("corral-call", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("call file: %w", err)
	}
	var out, start [2]int
	if err := syscall.Pipe2(out[:], syscall.O_CLOEXEC); err != nil {
		syscall.Close(call)
		return nil, fmt.Errorf("output pipe: %w", err)
	}
	if err := syscall.Pipe2(start[:], syscall.O_CLOEXEC); err != nil {
		closeAll(call, out[0], out[1])
		return nil, fmt.Errorf("start pipe: %w", err)
	}
	pid, err := x.forkExec(x.shell, []string{x.shell, "-c", bootstrap}, []int{out[1], call, start[0]})
	closeAll(out[1], start[0])
	if err != nil {
		closeAll(call, out[0], start[1])
		return nil, err
	}
	killFirst(pid)
	return &waiting{pid: pid, out: out[0], call: call, start: start[1]}, nil
}

// killFirst has the kernel kill process pid, and whatever it starts, before
// the executor when the sandbox runs out of memory: a command's processes
// may each be smaller than the executor, which the sandbox cannot lose.
// Raising a score needs no privilege; a failure leaves the kernel's own
// choice.
func killFirst(pid int) {
	_ = os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte("1000"), 0)
}

// give sets the shell's limits, hands it its command, and lets it go. The
// shell waits until then, so the limits are in place before the command
// runs.
func (w *waiting) give(l limits, command string) error {
	defer closeAll(w.call, w.start)
	if err := setLimits(w.pid, l); err != nil {
		return err
	}
	for off := 0; off < len(command); {
		n, err := unix.Pwrite(w.call, []byte(command[off:]), int64(off))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("write the call: %w", err)
		}
		off += n
	}
	if _, err := syscall.Write(w.start, []byte("\n")); err != nil {
		return fmt.Errorf("start the call: %w", err)
	}
	return nil
}

// setLimits sets the rlimits of process pid: each as both soft and hard
// limit, except CPU, whose hard limit is CPUHard.
func setLimits(pid int, l limits) error {
	want := [][2]uint64{{l.CPU, l.CPUHard}, {l.AS, l.AS}, {l.FSize, l.FSize}, {l.NoFile, l.NoFile}, {l.NProc, l.NProc}}
	for i, res := range rlimitResources {
		lim := unix.Rlimit{Cur: want[i][0], Max: want[i][1]}
		if err := unix.Prlimit(pid, res, &lim, nil); err != nil {
			return fmt.Errorf("prlimit %d: %w", res, err)
		}
	}
	return nil
}

// discard kills the shell and reaps it.
func (w *waiting) discard() {
	_ = syscall.Kill(w.pid, syscall.SIGKILL)
	var ws syscall.WaitStatus
	for {
		if _, err := syscall.Wait4(w.pid, &ws, 0, nil); err != syscall.EINTR {
			break
		}
	}
	syscall.Close(w.out)
}

// startShell starts the command under /bin/sh, which applies the limits
// and execs the shell: a process start more than a shell started ahead.
func (x *executor) startShell(req request) (pid, out int, err error) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		return 0, 0, fmt.Errorf("output pipe: %w", err)
	}
	pid, err = x.forkExec("/bin/sh", shellArgs(x.effective(req.Limits), x.shell, req.Command), []int{p[1]})
	syscall.Close(p[1])
	if err != nil {
		syscall.Close(p[0])
		return 0, 0, err
	}
	return pid, p[0], nil
}

// forkExec starts argv in a process group of its own, with stdin on
// /dev/null, stdout and stderr on files[0], and files[1:] as fds 3 and
// on. No other descriptor is passed: everything the executor opens is
// close-on-exec.
func (x *executor) forkExec(path string, argv []string, files []int) (int, error) {
	fds := []uintptr{x.null.Fd(), uintptr(files[0]), uintptr(files[0])}
	for _, f := range files[1:] {
		fds = append(fds, uintptr(f))
	}
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Env:   x.env,
		Files: fds,
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		return 0, fmt.Errorf("start %s: %w", path, err)
	}
	return pid, nil
}

// effective returns the limits l, each lowered to the executor's own hard
// limit where that is lower.
func (x *executor) effective(l limits) limits {
	lower := func(v uint64, res int) uint64 { return min(v, x.hard[res]) }
	l.CPUHard = lower(l.CPUHard, unix.RLIMIT_CPU)
	l.CPU = min(l.CPU, l.CPUHard)
	l.AS = lower(l.AS, unix.RLIMIT_AS)
	l.FSize = lower(l.FSize, unix.RLIMIT_FSIZE)
	l.NoFile = lower(l.NoFile, unix.RLIMIT_NOFILE)
	l.NProc = lower(l.NProc, unix.RLIMIT_NPROC)
	return l
}

func closeAll(fds ...int) {
	for _, fd := range fds {
		syscall.Close(fd)
	}
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

// drain reads fd to EOF into w, and into live, when not nil, which it
// leaves nothing pending. EOF comes when every process holding the write
// end has closed it or died.
func drain(fd int, w io.Writer, live *liveWriter) {
	buf := make([]byte, 32<<10)
	for {
		if d, pending := live.due(); pending && !waitReadable(fd, d) {
			// Nothing more came while what is pending waited.
			live.flush()
			continue
		}
		n, err := syscall.Read(fd, buf)
		if err == syscall.EINTR {
			continue
		}
		if n <= 0 {
			if live != nil {
				live.flush()
			}
			return
		}
		_, _ = w.Write(buf[:n])
		if live != nil {
			live.add(buf[:n])
		}
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
// /bin/sh has applied the limits: how a sandbox without bash runs a call.
//
// /bin/sh is dash on Debian and bash in POSIX mode elsewhere. Both take -v
// in KiB and -f in 512-byte blocks (bash outside POSIX mode would use
// 1024-byte blocks for -f). The process limit is -u in bash but -p in dash,
// where -u is an error; in bash -p is the read-only pipe size, so try one
// then the other. Failing to set the other limits fails the call rather
// than running unconfined.
func shellArgs(l limits, shell, command string) []string {
	script := fmt.Sprintf(`echo 1000 >/proc/self/oom_score_adj 2>/dev/null
ulimit -S -t %d && ulimit -H -t %d && ulimit -v %d && ulimit -f %d && ulimit -n %d || exit 126
{ ulimit -u %d || ulimit -p %d; } 2>/dev/null
exec %s -c "$1"`,
		l.CPU, l.CPUHard, l.AS/1024, l.FSize/512, l.NoFile, l.NProc, l.NProc, shell)
	return []string{"/bin/sh", "-c", script, "sh", command}
}
