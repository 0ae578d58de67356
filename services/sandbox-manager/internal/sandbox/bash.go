package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"corral.dev/pkg/tool"
)

// ErrNotRun is returned, wrapped, by [Driver.Run] when a Bash call could
// not start: its sandbox could not be started (the egress service could
// not be opened for it, say), or its executor could not start the
// command. None of the call ran, so it may simply be run again.
var ErrNotRun = errors.New("call not run")

// callBackstop is how long past a call's timeout the manager waits for the
// executor, which enforces the timeout itself, before it gives up on the
// sandbox and kills it.
const callBackstop = 10 * time.Second

// bash runs one Bash call in the session's live sandbox, starting one if
// the session has none.
//
// The call's timeout is its own (in ms) or the default, capped at the
// maximum. The executor kills every process of the call when it expires,
// and when the command exits. Output is stdout and stderr interleaved as
// written, capped at the output limit. If ctx ends first, the sandbox is
// killed and bash returns ctx's error.
//
// Meanwhile live, when not nil, hears the output as it is written (see
// [Output]).
//
// After a call of a sandbox with network, what it sent out is drained from
// the egress service into the result (see [Driver.drainEgress]).
func (d *Driver) bash(ctx context.Context, s *session, a *tool.BashArgs, live Output) (Result, error) {
	res, network, err := d.runBash(ctx, s, a, live)
	if err == nil && network {
		d.drainEgress(ctx, s, &res)
	}
	return res, err
}

// runBash is bash without the drain, reporting whether the sandbox the
// call ran in has network.
func (d *Driver) runBash(ctx context.Context, s *session, a *tool.BashArgs, live Output) (Result, bool, error) {
	timeout := d.cfg.DefaultTimeout
	if a.Timeout > 0 {
		timeout = time.Duration(a.Timeout) * time.Millisecond
	}
	timeout = min(timeout, d.cfg.MaxTimeout)
	req := d.request(a.Command, timeout)
	if live != nil {
		req.Live = d.cfg.LiveLimit
	}

	var resp response
	var oom, network bool
	for attempt := 0; ; attempt++ {
		b, fresh, err := d.liveBox(ctx, s, s.key)
		if err != nil {
			return Result{}, false, fmt.Errorf("bash: %w: %w", ErrNotRun, err)
		}
		network = b.network
		callCtx, cancel := context.WithTimeout(ctx, timeout+callBackstop)
		stop := context.AfterFunc(callCtx, b.kill)
		resp, err = b.call(req, live)
		stop()
		d.ran(s, b)
		oom = b.outOfMemory()
		expired := callCtx.Err() != nil
		cancel()
		if err == nil {
			break
		}
		complaint := b.complaint()
		d.discard(s, b)
		if oom {
			complaint = strings.TrimSpace(complaint + " " + d.outOfMemory())
		}
		switch {
		case ctx.Err() != nil:
			return Result{IsError: true}, false, fmt.Errorf("bash: %w", ctx.Err())
		case expired:
			return Result{TimedOut: true, IsError: true, Output: fmt.Sprintf("Command timed out after %s", timeout)}, network, nil
		case errors.Is(err, errNotSent) && !fresh && attempt == 0:
			// The sandbox died while idle and the command never reached
			// it: run it in a new one.
			continue
		case !b.greeted:
			// The executor reads no request before its hello.
			return Result{}, false, fmt.Errorf("bash: start sandbox: %w: %w: %s", ErrNotRun, err, complaint)
		}
		return Result{}, false, fmt.Errorf("bash: %w: %s", err, complaint)
	}
	if resp.Error != "" {
		return Result{}, false, fmt.Errorf("bash: %w: %s", ErrNotRun, resp.Error)
	}

	out := &cappedBuffer{buf: resp.Output, limit: d.cfg.OutputLimit, omitted: resp.Omitted}
	res := Result{Truncated: out.truncated()}
	var b strings.Builder
	b.WriteString(out.String())
	if oom {
		// Whatever the exit code says (a shell may even exit 0 after its
		// child was killed), the model should know why.
		res.IsError = true
		newline(&b)
		b.WriteString(d.outOfMemory())
	}
	if resp.TimedOut {
		res.TimedOut, res.IsError = true, true
		newline(&b)
		fmt.Fprintf(&b, "Command timed out after %s", timeout)
		res.Output = b.String()
		return res, network, nil
	}
	code := resp.ExitCode
	res.ExitCode = &code
	if code != 0 {
		res.IsError = true
		newline(&b)
		fmt.Fprintf(&b, "Exit code %d", code)
		if sig := code - 128; sig > 0 && sig < 65 {
			// A shell reports death by signal n as 128+n.
			fmt.Fprintf(&b, " (%s)", syscall.Signal(sig))
		}
	}
	res.Output = b.String()
	return res, network, nil
}

// outOfMemory is what the model is told when the kernel killed a process
// of its sandbox for want of memory.
func (d *Driver) outOfMemory() string {
	return fmt.Sprintf("The sandbox ran out of memory: it may use %d MiB in all, and a process was killed.", d.cfg.MemoryBytes>>20)
}

// request returns the executor request that runs command under the
// configured limits.
func (d *Driver) request(command string, timeout time.Duration) request {
	c := d.cfg
	nproc := uint64(c.Processes)
	if d.owner != nil && d.cgroups.has("pids") {
		// Every sandbox is the same host user, whose processes
		// RLIMIT_NPROC counts across the machine: it would bound them all
		// together, while each has its own pids cgroup.
		nproc = unix.RLIM_INFINITY
	}
	return request{
		Command:     command,
		TimeoutMS:   timeout.Milliseconds(),
		OutputLimit: c.OutputLimit,
		Limits: limits{
			CPU:     uint64(c.CPUSeconds),
			CPUHard: uint64(c.CPUSeconds + cpuGrace),
			AS:      uint64(c.MemoryBytes / 1024 * 1024),
			FSize:   uint64(c.FileSizeBytes / 512 * 512),
			NoFile:  uint64(c.OpenFiles),
			NProc:   nproc,
		},
	}
}

// newline ends b's text with a newline unless it is empty or already does.
func newline(b *strings.Builder) {
	if s := b.String(); s != "" && !strings.HasSuffix(s, "\n") {
		b.WriteByte('\n')
	}
}

// errorf returns a model-facing failure.
func errorf(format string, args ...any) Result {
	return Result{Output: fmt.Sprintf(format, args...), IsError: true}
}

// outside is the model-facing refusal of a path that leaves the workspace.
func outside(p string, err error) Result {
	if errors.Is(err, tool.ErrPathOutside) {
		return errorf("path %s is outside %s", p, tool.Workspace)
	}
	return errorf("invalid path %s: %v", p, err)
}
