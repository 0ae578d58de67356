package sandbox

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"corral.dev/pkg/egressapi"
	"corral.dev/pkg/environment"
)

// Layer is an environment's layer as a session's sandbox gets it (see
// [Config.Layer]): the host directory bound read-only at
// [environment.Mount], and the environment's name and version, which the
// Driver gives the egress service with the session's identity.
type Layer struct {
	Dir                  string
	Environment, Version string
}

// layerMount is a layer's host directory as one sandbox binds it:
// writable while an environment's setup builds it, read-only for a
// session. No directory, no layer.
type layerMount struct {
	dir      string
	writable bool
}

// setupDir, under the workspaces' directory, holds the scratch
// workspaces of the sandboxes that run environments' setups (no tenant
// name starts with a dot).
const setupDir = ".setup"

// layerArgs returns the bwrap options that bind m at [environment.Mount],
// with the layer's directories first on PATH and its variables
// ([environment.Env]); none when m has no directory.
func (d *Driver) layerArgs(m layerMount) []string {
	if m.dir == "" {
		return nil
	}
	bind := "--ro-bind"
	if m.writable {
		bind = "--bind"
	}
	args := []string{bind, m.dir, environment.Mount}
	// Later --setenv options win: this PATH replaces the usual one.
	i := slices.IndexFunc(d.env, func(kv [2]string) bool { return kv[0] == "PATH" })
	path := strings.Join(append(environment.Path(), d.env[i][1]), ":")
	args = append(args, "--setenv", "PATH", path)
	for _, kv := range environment.Env() {
		args = append(args, "--setenv", kv[0], kv[1])
	}
	return args
}

// layer asks [Config.Layer] for the layer of the session of s, whose
// sandbox is about to start, and adds its environment to the identity of
// s, which the egress service is opened with.
func (d *Driver) layer(ctx context.Context, s *session) (Layer, error) {
	if d.cfg.Layer == nil {
		return Layer{}, nil
	}
	l, err := d.cfg.Layer(ctx, s.id)
	switch {
	case err != nil:
		return Layer{}, fmt.Errorf("the session's environment: %w", err)
	case l.Dir == "":
		return Layer{}, nil
	case !filepath.IsAbs(l.Dir):
		return Layer{}, fmt.Errorf("the session's environment: layer %q is not absolute", l.Dir)
	}
	s.id.Environment, s.id.EnvironmentVersion = l.Environment, l.Version
	return l, nil
}

// Setup runs command once as an environment's setup: in a sandbox of its
// own, made like a session's but with the host directory layer, which
// Setup makes (its parent must exist, it must not), bound writable at
// [environment.Mount], the layer's variables, a scratch /workspace that
// is removed after, and network as the egress service gives id (whose
// Phase is [egressapi.PhaseSetup], and whose Session names the build). The
// sandbox is stopped, and its egress closed, before Setup returns; what
// the command left in layer stays.
//
// The command runs with the limits of a Bash call, but timeout, which
// may exceed their longest, and Result is as a Bash call's: its exit
// code, its output (capped at the output limit, from its start),
// TimedOut. An error means the command could not run: the Driver is
// closed, layer could not be made, the egress service could not be
// opened (wrapping [ErrNotRun]), the sandbox was lost; ctx ending kills
// it and is reported as its error.
func (d *Driver) Setup(ctx context.Context, id egressapi.Identity, layer, command string, timeout time.Duration) (Result, error) {
	start := time.Now()
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return Result{}, fmt.Errorf("setup: %w", errClosed)
	}
	if !tenantRE().MatchString(id.Tenant) {
		return Result{}, fmt.Errorf("setup: invalid tenant %q", id.Tenant)
	}
	if err := d.owner.makeDir(layer); err != nil {
		return Result{}, fmt.Errorf("setup: make the layer: %w", err)
	}
	scratch := filepath.Join(d.cfg.Dir, setupDir, strings.ToLower(rand.Text()))
	if err := os.MkdirAll(filepath.Dir(scratch), 0o711); err != nil {
		return Result{}, fmt.Errorf("setup: %w", err)
	}
	if err := d.owner.makeDir(scratch); err != nil {
		return Result{}, fmt.Errorf("setup: %w", err)
	}
	defer os.RemoveAll(scratch)
	s := &session{key: scratch, id: id}
	egress, err := d.openEgress(ctx, s)
	if err != nil {
		return Result{}, fmt.Errorf("setup: %w: %w", ErrNotRun, err)
	}
	if egress != "" {
		// Closed whatever ended the setup, ctx too.
		defer d.closeEgress(context.WithoutCancel(ctx), id, id.Tenant, id.Session)
	}
	b, err := d.startBox(scratch, "", egress, layerMount{dir: layer, writable: true})
	if err != nil {
		return Result{}, fmt.Errorf("setup: %w: %w", ErrNotRun, err)
	}
	defer b.stop()
	callCtx, cancel := context.WithTimeout(ctx, timeout+callBackstop)
	defer cancel()
	stop := context.AfterFunc(callCtx, b.kill)
	resp, err := b.call(d.request(command, timeout), nil)
	stop()
	oom := b.outOfMemory()
	if err != nil {
		complaint := b.complaint()
		switch {
		case ctx.Err() != nil:
			return Result{}, fmt.Errorf("setup: %w", ctx.Err())
		case callCtx.Err() != nil:
			return Result{TimedOut: true, IsError: true, Output: fmt.Sprintf("The setup timed out after %s", timeout), Duration: time.Since(start)}, nil
		case errors.Is(err, errNotSent), !b.greeted:
			return Result{}, fmt.Errorf("setup: start sandbox: %w: %w: %s", ErrNotRun, err, complaint)
		}
		return Result{}, fmt.Errorf("setup: %w: %s", err, complaint)
	}
	if resp.Error != "" {
		return Result{}, fmt.Errorf("setup: %w: %s", ErrNotRun, resp.Error)
	}
	out := &cappedBuffer{buf: resp.Output, limit: d.cfg.OutputLimit, omitted: resp.Omitted}
	res := Result{Output: out.String(), Truncated: out.truncated(), TimedOut: resp.TimedOut, Duration: time.Since(start)}
	if !resp.TimedOut {
		code := resp.ExitCode
		res.ExitCode = &code
	}
	res.IsError = resp.TimedOut || resp.ExitCode != 0 || oom
	if oom {
		res.Output = strings.TrimRight(res.Output, "\n") + "\n" + d.outOfMemory()
	}
	return res, nil
}
