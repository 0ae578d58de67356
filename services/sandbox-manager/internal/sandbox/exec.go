package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// waitDelay bounds how long we wait for the output pipe to close after bwrap
// exits or is killed. With a PID namespace every process in the sandbox dies
// with it, so this only guards against the unexpected.
const waitDelay = 2 * time.Second

// sandboxCmd is one bwrap invocation running one command.
type sandboxCmd struct {
	cmd     *exec.Cmd
	mu      sync.Mutex
	exited  bool // bwrap has exited and may be reaped: its pid may be reused
	out     *cappedBuffer
	status  *os.File // read end of bwrap's --json-status-fd
	statusW *os.File // write end, closed in the parent once bwrap has started
}

// outcome is how a sandboxCmd ended.
type outcome struct {
	// started is whether bwrap got as far as running the command; if not,
	// the sandbox could not be built and out holds bwrap's complaint.
	started bool
	// exitCode is the command's exit status, 128+n if killed by signal n.
	exitCode int
	// waitErr is the error from Wait other than the exit status.
	waitErr error
}

// newCmd prepares bwrap to run command in the sandbox of workspace. bwrap
// leads a process group of its own so that kill reaches it and the
// sandbox's init, and its environment is empty so nothing of ours leaks in.
func (d *Driver) newCmd(workspace, command string) (*sandboxCmd, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("status pipe: %w", err)
	}
	args := d.sandboxArgs(workspace)
	args = append(args, "--json-status-fd", "3", "--")
	args = append(args, d.shellArgs(command)...)

	out := newCappedBuffer(d.cfg.OutputLimit)
	cmd := exec.Command(d.bwrap, args...)
	cmd.Env = []string{}
	cmd.Dir = "/"
	// One writer for both streams: os/exec then shares one pipe between
	// them, which keeps stdout and stderr in the order they were written.
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.ExtraFiles = []*os.File{w} // fd 3
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = waitDelay
	return &sandboxCmd{cmd: cmd, out: out, status: r, statusW: w}, nil
}

// start starts bwrap. On error the command is finished with.
func (s *sandboxCmd) start() error {
	err := s.cmd.Start()
	s.statusW.Close()
	if err != nil {
		s.status.Close()
		return err
	}
	return nil
}

// kill kills bwrap's whole process group. Once the sandbox's init (bwrap's
// child, in the same group) dies, the kernel kills everything else in the
// sandbox's PID namespace, whatever process group or session it is in.
//
// kill may race with wait, so it only signals while bwrap is unreaped: until
// then its pid, and so the group id, cannot belong to anyone else.
func (s *sandboxCmd) kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.exited {
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// wait waits for bwrap to exit and reads its status.
func (s *sandboxCmd) wait() outcome {
	var o outcome
	// Wait for the exit without reaping, so kill can stop using the pid first.
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, s.cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			break // on any other error, Wait below reports it
		}
	}
	s.mu.Lock()
	s.exited = true
	s.mu.Unlock()
	err := s.cmd.Wait()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) && !errors.Is(err, exec.ErrWaitDelay) {
		o.waitErr = err
	}
	o.exitCode = s.cmd.ProcessState.ExitCode()
	if ws, ok := s.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		o.exitCode = 128 + int(ws.Signal())
	}

	// bwrap has exited, so the pipe is at EOF unless something in the
	// sandbox inherited it; the deadline covers that.
	_ = s.status.SetReadDeadline(time.Now().Add(waitDelay))
	defer s.status.Close()
	dec := json.NewDecoder(s.status)
	for {
		var st struct {
			ChildPID *int `json:"child-pid"`
			ExitCode *int `json:"exit-code"`
		}
		if dec.Decode(&st) != nil {
			// EOF, or cut short by a kill: what was read stands.
			break
		}
		if st.ChildPID != nil {
			o.started = true
		}
		if st.ExitCode != nil {
			o.exitCode = *st.ExitCode
		}
	}
	return o
}
