package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrSandboxLost is returned, wrapped, by [Driver.Run] when a session's
// sandbox ended or stopped making sense in the middle of a Bash call: its
// executor was killed from outside, ran out of memory, or broke the
// protocol. The command may have run partly or fully. The sandbox is
// discarded and the session's next call starts a new one; the workspace
// is kept.
var ErrSandboxLost = errors.New("sandbox lost during the call")

const (
	// waitDelay bounds how long we wait for bwrap's stderr to close after
	// bwrap exits. With a PID namespace every process in the sandbox dies
	// with it, so this only guards against the unexpected.
	waitDelay = 2 * time.Second
	// stopGrace is how long a sandbox whose stdin was closed gets to exit
	// on its own before it is killed.
	stopGrace = time.Second
	// stderrLimit is how much of bwrap's and the executor's stderr is kept
	// for error messages.
	stderrLimit = 4 << 10
	// maxHello bounds the executor's first line.
	maxHello = 4 << 10
)

// box is a live sandbox: bwrap running our executor as the first process
// of a sandbox around one workspace. Calls on a box must not overlap; kill
// and stop may be called at any time, from any goroutine.
type box struct {
	cmd     *exec.Cmd
	in      *os.File // the executor's stdin
	out     *os.File // the executor's stdout
	br      *bufio.Reader
	stderr  *cappedBuffer // written by os/exec until done is closed
	greeted bool          // the executor's hello has been read
	nextID  uint64
	maxResp int
	network bool // it reaches the egress service: its calls are drained

	// cgroups holds the sandbox's cgroups, cgroup, when it has them;
	// ooms counts its processes killed for want of memory so far.
	cgroups *cgroups
	cgroup  *cgroup
	ooms    uint64

	mu     sync.Mutex
	exited bool          // bwrap has exited and may be reaped: its pid may be reused
	status error         // how bwrap ended (bwrap exits as the executor did); set before done closes
	frozen bool          // its processes are stopped (SIGSTOP)
	done   chan struct{} // closed once bwrap is reaped and the pipes are closed
}

// startBox starts a sandbox around workspace, with our own executable as
// its executor, with network through the egress directory egress unless
// that is "", and with an environment's layer unless layer has no
// directory (see [Driver.sandboxArgs]). It returns once bwrap is
// running, without waiting for the executor: the first call pipelines its
// request behind the startup.
func (d *Driver) startBox(workspace, skills, egress string, layer layerMount) (*box, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("stdin pipe: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, fmt.Errorf("stdout pipe: %w", err)
	}
	args := d.sandboxArgs(workspace, skills, egress, layer)
	args = append(args, "--", executorPath, ExecutorArg)
	b := &box{
		in:      inW,
		out:     outR,
		br:      bufio.NewReaderSize(outR, 64<<10),
		stderr:  newCappedBuffer(stderrLimit),
		maxResp: d.cfg.OutputLimit*4/3 + 64<<10, // base64 output and the rest
		network: egress != "",
		done:    make(chan struct{}),
	}
	b.cmd = exec.Command(d.bwrap, args...)
	b.cmd.Env = []string{}
	b.cmd.Dir = "/"
	b.cmd.Stdin = inR
	b.cmd.Stdout = outW
	b.cmd.Stderr = b.stderr
	// Its own process group, so that kill reaches bwrap and its helpers;
	// killed if the manager dies, which is why it is forked from the
	// starter's thread (see [starter]).
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if d.owner != nil {
		// Root in the sandbox is the sandbox user on the host (see owner.go).
		b.cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(d.owner.uid), Gid: uint32(d.owner.gid), Groups: []uint32{}}
	}
	b.cmd.WaitDelay = waitDelay
	// The seccomp filter, which bwrap reads from a pipe: it is far smaller
	// than a pipe's buffer.
	filterR, filterW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("seccomp pipe: %w", err)
	}
	_, err = filterW.Write(d.seccomp)
	filterW.Close()
	defer filterR.Close()
	if err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("seccomp pipe: %w", err)
	}
	b.cmd.ExtraFiles = []*os.File{filterR} // fd 3: see sandboxArgs
	// Born in cgroups of its own, so that a fork bomb fills only its own
	// and its memory and CPU are bounded as a whole.
	var cgroupFD = -1
	if d.cgroups != nil {
		b.cgroup, err = d.cgroups.create(cgroupLimits{
			// Room for the executor's own threads beside the commands'.
			pids:   d.cfg.Processes + ownPids,
			memory: d.cfg.MemoryBytes,
			cpus:   d.cfg.CPUs,
		})
		if err == nil && d.cgroups.v2 {
			if cgroupFD, err = unix.Open(b.cgroup.dir(), unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
				b.cmd.SysProcAttr.UseCgroupFD, b.cmd.SysProcAttr.CgroupFD = true, cgroupFD
			} else {
				b.cgroup.remove()
			}
		}
		if err != nil {
			inR.Close()
			inW.Close()
			outR.Close()
			outW.Close()
			return nil, err
		}
		b.cgroups = d.cgroups
	}
	var startErr error
	err = d.starter.do(func() {
		if b.cgroups != nil && !b.cgroups.v2 {
			leave, err := b.cgroups.enter(b.cgroup)
			if err != nil {
				startErr = err
				return
			}
			defer leave()
		}
		startErr = b.cmd.Start()
	})
	if cgroupFD >= 0 {
		unix.Close(cgroupFD)
	}
	inR.Close()
	outW.Close()
	if err == nil {
		err = startErr
	}
	if err != nil {
		inW.Close()
		outR.Close()
		if b.cgroups != nil {
			b.cgroup.remove()
		}
		return nil, fmt.Errorf("start bwrap: %w", err)
	}
	go b.wait()
	return b, nil
}

// wait reaps bwrap, then closes the pipes, which ends any call in flight.
func (b *box) wait() {
	// Wait for the exit without reaping, so kill can stop using the pid first.
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, b.cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			break // on any other error, Wait below reports it
		}
	}
	b.mu.Lock()
	b.exited = true
	b.mu.Unlock()
	b.status = b.cmd.Wait()
	b.in.Close()
	b.out.Close()
	close(b.done)
	if b.cgroups != nil {
		b.cgroup.remove()
	}
}

// alive reports whether bwrap is still running.
func (b *box) alive() bool {
	select {
	case <-b.done:
		return false
	default:
		return true
	}
}

// kill kills bwrap's process group. bwrap's --die-with-parent then kills
// the executor, and with PID 1 of its namespace gone the kernel kills
// everything else in the sandbox, whatever process group or session it is
// in. kill may race with wait, so it only signals while bwrap is unreaped:
// until then its pid, and so the group id, cannot belong to anyone else.
func (b *box) kill() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.exited {
		_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// canFreeze reports whether the box can be suspended: its processes are
// known by its cgroups.
func (b *box) canFreeze() bool {
	return b.cgroups != nil
}

// freeze suspends every process of the sandbox with SIGSTOP: they stay,
// running nothing, until thaw. The executor must be idle, between calls,
// when nothing else of the sandbox runs but the next call's shell, waiting
// for it (a call's processes end with it).
// Stopped processes still die at once of SIGKILL, so killing a suspended
// sandbox, or its manager dying, needs no thaw. (The cgroup v1 freezer
// would do as well, but each change of its state waits for an RCU grace
// period: 1.5 ms, against microseconds for the signals.)
func (b *box) freeze() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.exited {
		return errors.New("freeze: the sandbox has ended")
	}
	b.frozen = true
	// A second look catches a process forked while the first was stopped.
	stopped := map[int]bool{}
	for range 5 {
		pids, err := cgroupProcs(b.cgroup.dir())
		if err != nil {
			b.signalLocked(syscall.SIGCONT)
			b.frozen = false
			return fmt.Errorf("freeze: %w", err)
		}
		more := false
		for _, pid := range pids {
			if !stopped[pid] {
				_ = unix.Kill(pid, unix.SIGSTOP)
				stopped[pid], more = true, true
			}
		}
		if !more {
			return nil
		}
	}
	// Still forking after five looks: not idle, so not suspended.
	b.signalLocked(syscall.SIGCONT)
	b.frozen = false
	return errors.New("freeze: the sandbox's processes keep forking")
}

// thaw lets a frozen sandbox's processes run again.
func (b *box) thaw() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.frozen {
		return nil
	}
	if err := b.signalLocked(syscall.SIGCONT); err != nil {
		return fmt.Errorf("thaw: %w", err)
	}
	b.frozen = false
	return nil
}

// signalLocked sends sig to every process of the sandbox, as its cgroup
// lists them. A pid read there could be reused before the signal only if
// its process died in between; the processes of an idle sandbox end only
// when it is killed, after which nothing signals them.
func (b *box) signalLocked(sig syscall.Signal) error {
	pids, err := cgroupProcs(b.cgroup.dir())
	for _, pid := range pids {
		_ = unix.Kill(pid, sig)
	}
	return err
}

// suspended reports whether the sandbox is frozen.
func (b *box) suspended() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.frozen
}

// stop ends the sandbox and waits for it. It closes the executor's stdin,
// which an idle executor takes as the sign to exit, so that the sandbox
// winds down in order; one that does not exit promptly is killed.
func (b *box) stop() {
	_ = b.thaw() // to exit on its own
	b.in.Close()
	select {
	case <-b.done:
	case <-time.After(stopGrace):
		b.kill()
		<-b.done
	}
}

// greet reads the executor's hello, once: the sandbox is then set up
// (its mounts made) and the executor waits for calls.
func (b *box) greet() error {
	if b.greeted {
		return nil
	}
	var h hello
	if err := readMsg(b.br, maxHello, &h); err != nil {
		return fmt.Errorf("executor did not start: %w", err)
	}
	if h.Version != protocolVersion {
		return fmt.Errorf("executor speaks protocol version %d, not %d: was the binary replaced? restart the sandbox-manager", h.Version, protocolVersion)
	}
	b.greeted = true
	return nil
}

// errNotSent marks a call whose request never reached the executor, so the
// command certainly did not run.
var errNotSent = errors.New("request not sent")

// call sends req and returns the executor's response, giving live the
// output the executor sends as it is written meanwhile (req.Live asks for
// it). Any error leaves the box unusable.
func (b *box) call(req request, live Output) (response, error) {
	b.nextID++
	req.ID = b.nextID
	if err := writeMsg(b.in, req); err != nil {
		return response{}, fmt.Errorf("%w: %w", errNotSent, err)
	}
	if err := b.greet(); err != nil {
		return response{}, err
	}
	for {
		var resp response
		if err := readMsg(b.br, b.maxResp, &resp); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, os.ErrClosed) {
				return response{}, fmt.Errorf("%w: the executor exited", ErrSandboxLost)
			}
			return response{}, fmt.Errorf("%w: read response: %w", ErrSandboxLost, err)
		}
		if resp.ID != req.ID {
			return response{}, fmt.Errorf("%w: response %d to request %d", ErrSandboxLost, resp.ID, req.ID)
		}
		if !resp.Partial {
			return resp, nil
		}
		if live != nil {
			live(resp.Live, resp.Cut)
		}
	}
}

// complaint returns what bwrap and the executor wrote to stderr, once the
// sandbox is gone.
func (b *box) complaint() string {
	b.kill()
	<-b.done
	msg := strings.TrimSpace(b.stderr.String())
	if b.status != nil {
		msg = strings.TrimSpace(msg + " (bwrap: " + b.status.Error() + ")")
	}
	return msg
}

// outOfMemory reports whether the kernel has killed any of the sandbox's
// processes for want of memory since the last time it was asked.
func (b *box) outOfMemory() bool {
	if b.cgroup == nil {
		return false
	}
	n := b.cgroup.oomKills()
	killed := n > b.ooms
	b.ooms = n
	return killed
}
