package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"corral.dev/pkg/tool"
)

// bash runs one Bash call in a fresh sandbox around workspace.
//
// The call's timeout is its own (in ms) or the default, capped at the
// maximum. When it expires, or ctx is cancelled, bwrap's process group is
// killed, which takes down every process in the sandbox. Output is stdout and
// stderr interleaved as written, capped at the output limit.
func (d *Driver) bash(ctx context.Context, workspace string, a *tool.BashArgs) (Result, error) {
	timeout := d.cfg.DefaultTimeout
	if a.Timeout > 0 {
		timeout = time.Duration(a.Timeout) * time.Millisecond
	}
	timeout = min(timeout, d.cfg.MaxTimeout)
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	s, err := d.newCmd(workspace, a.Command)
	if err != nil {
		return Result{}, fmt.Errorf("bash: %w", err)
	}
	if err := s.start(); err != nil {
		return Result{}, fmt.Errorf("bash: start bwrap: %w", err)
	}
	stop := context.AfterFunc(callCtx, s.kill)
	o := s.wait()
	stop()

	res := Result{Truncated: s.out.truncated()}
	var b strings.Builder
	b.WriteString(s.out.String())
	switch {
	case ctx.Err() != nil:
		res.Output, res.IsError = b.String(), true
		return res, fmt.Errorf("bash: %w", ctx.Err())
	case callCtx.Err() != nil:
		res.TimedOut, res.IsError = true, true
		newline(&b)
		fmt.Fprintf(&b, "Command timed out after %s", timeout)
		res.Output = b.String()
		return res, nil
	case o.waitErr != nil:
		return Result{}, fmt.Errorf("bash: wait for bwrap: %w", o.waitErr)
	case !o.started:
		return Result{}, fmt.Errorf("bash: bwrap could not build the sandbox: %s", strings.TrimSpace(b.String()))
	}
	code := o.exitCode
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
	return res, nil
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
