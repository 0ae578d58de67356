package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"time"

	"corral.dev/pkg/egressapi"
	"corral.dev/pkg/lock"
	"corral.dev/pkg/tool"
	"github.com/google/uuid"
)

// probeTimeout bounds the trial sandbox that [New] starts.
const probeTimeout = 30 * time.Second

// tenantRE is what a tenant name must match. It is compiled on first use,
// not at init: every sandbox start runs this binary's package inits, and
// this pattern alone takes 0.2 ms to compile.
var tenantRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
})

// Driver runs tool calls in per-session workspaces. It is safe for concurrent
// use: calls of one session are serialised, calls of different sessions run
// in parallel. Each session with a recent Bash call keeps a live sandbox;
// [Driver.Close] kills them all.
type Driver struct {
	cfg           Config
	bwrap         string
	exe           string      // our own binary, the executor in every sandbox
	disableUserns bool        // bwrap supports --disable-userns (0.8+)
	system        []string    // bwrap options for the read-only system tree
	env           [][2]string // the whole environment of a sandboxed command
	starter       *starter    // the thread every bwrap is forked from
	cgroups       *cgroups    // nil: processes are bounded by their rlimits only
	cgroupsWhy    error       // which controllers are missing, and why
	seccomp       []byte      // the seccomp filter bwrap applies
	owner         *owner      // the sandbox user, when the manager is root; nil: sandboxes run as the manager

	// locks serialises each session's calls, by workspace path.
	locks    lock.Keyed
	mu       sync.Mutex
	sessions map[string]*session // by workspace path
	// hadBox holds the workspaces, by path, on which a sandbox of their
	// session's own started a call here since they were made: a new
	// sandbox on one of them replaces one that is gone (see
	// [Result].NewSandbox, and [Driver.ran]).
	hadBox  map[string]struct{}
	pool    map[string][]pooled // by tenant: see pool.go
	filling map[string]int      // pooled sandboxes starting, by tenant
	closed  bool
	idle    sync.WaitGroup // idle timers and pool fills that are running
}

// Result is what the model gets back from one call.
type Result struct {
	// Output is the text shown to the model.
	Output string
	// IsError marks a failed call: a non-zero exit, a timeout, a refused
	// path, a missing file, an edit that did not apply.
	IsError bool
	// ExitCode is the Bash command's exit status (128+n if killed by signal
	// n); nil for other tools and for a timed-out command.
	ExitCode *int
	// Truncated reports that output was dropped to fit the output limit.
	Truncated bool
	// TimedOut reports that a Bash command was killed at its timeout.
	TimedOut bool
	// Duration is how long the call took, excluding waiting for the session.
	Duration time.Duration
	// Egress is what a Bash call of a sandbox with network sent out and
	// had refused, as the egress service summed it up; nil when nothing
	// went out or was refused, or the summary could not be had.
	Egress *egressapi.Summary
	// NewSandbox reports that a Bash call ran in a new sandbox where its
	// session had one before on the same workspace, which is gone (stopped
	// when idle or by [Driver.Stop], lost, or ended by a timeout): the
	// workspace is as it was, but /tmp, /dev/shm and HOME started empty
	// again. It is false for a session's first sandbox on a workspace
	// (one that prepared it, cloning a repository, does not count, nor
	// one whose executor never started), for a suspended sandbox thawed,
	// and after [Driver.Destroy].
	NewSandbox bool
}

// New returns a Driver for cfg, with defaults filled in. It creates cfg.Dir
// if needed and checks that bwrap exists and can build a sandbox by running
// one. Errors wrap [ErrNoBwrap] if bwrap is missing and
// [ErrSandboxUnavailable] if it cannot create namespaces.
//
// Every sandbox runs this process's own executable as its executor, so the
// program must call [RunExecutorIfRequested] first thing in main; New fails
// if the trial sandbox's executor does not answer. Call [Driver.Close] to
// stop the sandboxes.
func New(cfg Config) (*Driver, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("sandbox config: %w", err)
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("sandbox config: %w", err)
	}
	path, version, err := findBwrap(cfg.Bwrap)
	if err != nil {
		return nil, err
	}
	if version[0] == 0 && version[1] < 5 {
		return nil, fmt.Errorf("%w (bwrap %d.%d is too old: need 0.5 or later)", ErrNoBwrap, version[0], version[1])
	}
	system, err := systemArgs()
	if err != nil {
		return nil, fmt.Errorf("sandbox system tree: %w", err)
	}
	filter, err := seccompProgram()
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the executor binary: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, emptyDir), 0o700); err != nil {
		return nil, fmt.Errorf("create sandbox dir: %w", err)
	}
	var own *owner
	if os.Geteuid() == 0 {
		own = &owner{uid: cfg.User, gid: cfg.Group}
		if err := own.grantSearch(cfg.Dir); err != nil {
			return nil, fmt.Errorf("sandbox dir: %w", err)
		}
		if exe, err = installExecutor(exe, cfg.Dir); err != nil {
			return nil, fmt.Errorf("install the executor binary: %w", err)
		}
	}
	d := &Driver{
		cfg:           cfg,
		bwrap:         path,
		exe:           exe,
		disableUserns: version[0] > 0 || version[1] >= 8,
		system:        system,
		env:           sandboxEnv(presentDirs(toolchainDirs)),
		seccomp:       filter,
		owner:         own,
		starter:       newStarter(),
		sessions:      make(map[string]*session),
		hadBox:        make(map[string]struct{}),
		pool:          make(map[string][]pooled),
		filling:       make(map[string]int),
	}
	_ = os.RemoveAll(filepath.Join(cfg.Dir, ".pool")) // a predecessor's
	d.cgroups, d.cgroupsWhy = newCgroups(cgroupLimits{memory: cfg.NodeMemoryBytes, cpus: cfg.NodeCPUs})
	if err := d.probe(); err != nil {
		d.starter.stop()
		if d.cgroups != nil {
			d.cgroups.close()
		}
		return nil, err
	}
	return d, nil
}

// ProcessesConfined reports whether each sandbox's processes are capped by
// a pids cgroup of its own, and if not, why.
func (d *Driver) ProcessesConfined() (bool, error) {
	return d.cgroups.has("pids"), d.cgroupsWhy
}

// Cgroups returns the cgroup controllers that confine each sandbox (of
// pids, memory and cpu), and why any is missing: where it is, only the
// rlimits of each process bound that resource.
func (d *Driver) Cgroups() ([]string, error) {
	if d.cgroups == nil {
		return nil, d.cgroupsWhy
	}
	return d.cgroups.ctls, d.cgroupsWhy
}

// probe checks that bwrap can create namespaces at all, then builds one
// sandbox around cfg.Dir and runs true in it through the executor.
func (d *Driver) probe() error {
	bare := exec.Command(d.bwrap, "--unshare-all", "--unshare-user", "--ro-bind", "/", "/", "--", "/bin/sh", "-c", ":")
	bare.Env = []string{}
	if out, err := bare.CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %v: %s", ErrSandboxUnavailable, err, bytes.TrimSpace(out))
	}

	b, err := d.startBox(d.cfg.Dir, "", "", layerMount{})
	if err != nil {
		return fmt.Errorf("probe sandbox: %w", err)
	}
	// New takes no context, so the probe carries its own deadline.
	timer := time.AfterFunc(probeTimeout, b.kill)
	resp, err := b.call(d.request("true", probeTimeout), nil)
	timer.Stop()
	if err != nil {
		err = fmt.Errorf("probe sandbox: %w: %s", err, b.complaint())
		if !b.greeted {
			err = fmt.Errorf("%w (unless bwrap says why, check that main calls RunExecutorIfRequested first)", err)
		}
		return err
	}
	b.stop()
	switch {
	case resp.Error != "":
		return fmt.Errorf("probe sandbox: %s", resp.Error)
	case resp.ExitCode != 0:
		return fmt.Errorf("probe sandbox: exit code %d: %s", resp.ExitCode, bytes.TrimSpace(resp.Output))
	}
	return nil
}

// Workspace returns the host directory of a session's workspace, or "" if
// tenant is not a valid tenant name. The directory may not exist yet.
func (d *Driver) Workspace(tenant string, session uuid.UUID) string {
	if !tenantRE().MatchString(tenant) {
		return ""
	}
	return filepath.Join(d.cfg.Dir, tenant, session.String())
}

func (d *Driver) workspace(tenant string, session uuid.UUID) (string, error) {
	if !tenantRE().MatchString(tenant) {
		return "", fmt.Errorf("invalid tenant %q: want %s", tenant, tenantRE())
	}
	if session == uuid.Nil {
		return "", errors.New("invalid session: nil uuid")
	}
	return d.Workspace(tenant, session), nil
}

// Run executes one tool call — args is one of the pointers [tool.Parse]
// returns — in the workspace of the session id names, creating the
// workspace on first use. id is also who the session's sandbox speaks for
// to the egress service: its tenant, session and user, and its
// environment. Run waits for the session's previous call to finish; ctx
// bounds that wait and the call itself. Everything the model should see,
// failures included, comes back in the [Result]; an error means the call
// could not be carried out (invalid tenant, unknown args type, workspace
// or sandbox could not be set up, the egress service could not be opened
// (these last wrap [ErrNotRun]), sandbox lost mid-call ([ErrSandboxLost]),
// Driver closed, ctx cancelled).
func (d *Driver) Run(ctx context.Context, id egressapi.Identity, args any) (Result, error) {
	return d.RunWithOutput(ctx, id, args, nil)
}

// Output hears a running Bash call's output as it is written, stdout and
// stderr as one stream (as its result holds them), in pieces that may
// split a line or a character. It hears at most [Config.LiveLimit] bytes;
// cut, set on its last call, says the call wrote more, which it does not
// hear. It is called on the goroutine running the call, which waits for
// it.
type Output func(p []byte, cut bool)

// RunWithOutput is [Driver.Run], with a Bash call's output heard by out
// as it is written (nil: not heard). The result is the same either way.
func (d *Driver) RunWithOutput(ctx context.Context, id egressapi.Identity, args any, out Output) (Result, error) {
	tenant, sessionID := id.Tenant, id.Session
	// A workspace is made by the first call that may write to it; until
	// then, a call that only reads finds it empty (see [Driver.fileTool]).
	var call func(ctx context.Context, s *session) (Result, error)
	writes := true
	switch a := args.(type) {
	case *tool.BashArgs:
		call = func(ctx context.Context, s *session) (Result, error) { return d.bash(ctx, s, a, out) }
	case *tool.WriteArgs, *tool.EditArgs:
		call = func(ctx context.Context, s *session) (Result, error) { return d.fileTool(ctx, s.key, a, true) }
	case *tool.ReadArgs, *tool.GlobArgs, *tool.GrepArgs:
		writes = false
		call = func(ctx context.Context, s *session) (Result, error) { return d.fileTool(ctx, s.key, a, false) }
	default:
		return Result{}, fmt.Errorf("run: unsupported arguments %T", args)
	}
	dir, err := d.workspace(tenant, sessionID)
	if err != nil {
		return Result{}, err
	}
	s, unlock, ok := d.lock(ctx, dir)
	if !ok {
		return Result{}, fmt.Errorf("wait for session %s: %w", sessionID, ctx.Err())
	}
	defer unlock()
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return Result{}, fmt.Errorf("run: %w", errClosed)
	}
	if s.box == nil {
		_, err := os.Stat(dir)
		s.resumable = err == nil
	}
	if writes {
		if err := d.makeWorkspace(dir); err != nil {
			return Result{}, fmt.Errorf("create workspace: %w", err)
		}
	}
	s.id = id
	s.replaced = false
	start := time.Now()
	res, err := call(ctx, s)
	res.Duration = time.Since(start)
	res.NewSandbox = s.replaced
	if s.refill {
		s.refill = false
		d.refill(tenant, s.skills)
	}
	return res, err
}

// makeWorkspace makes the workspace dir, and its tenant's directory,
// unless they exist.
func (d *Driver) makeWorkspace(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	// Tenants' directories only let through (to the sandbox user).
	if err := os.MkdirAll(filepath.Dir(dir), 0o711); err != nil {
		return err
	}
	if err := d.owner.makeDir(dir); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return nil
}

// Stop ends a session's sandbox, if it has one, and keeps its workspace:
// the next call starts a new sandbox on it. It waits for a running call of
// the session to end first, which its timeout bounds, and reports whether
// there was a sandbox to end.
func (d *Driver) Stop(tenant string, session uuid.UUID) bool {
	if !d.Active(tenant, session) {
		return false
	}
	s, unlock := d.lockWait(d.Workspace(tenant, session))
	defer unlock()
	d.mu.Lock()
	b := s.box
	s.box, s.suspendedAt = nil, time.Time{}
	d.mu.Unlock()
	if b == nil {
		return false
	}
	b.stop()
	return true
}

// Destroy stops a session's sandbox and removes its workspace, and has the
// egress service, if any, remove the session's socket and directory. It
// waits for a running call of the session to end first, which its timeout
// bounds; ctx bounds only the request to the egress service, whose
// failure is logged, not returned. Destroying a session that has no
// workspace is not an error.
func (d *Driver) Destroy(ctx context.Context, tenant string, session uuid.UUID) error {
	dir, err := d.workspace(tenant, session)
	if err != nil {
		return err
	}
	s, unlock := d.lockWait(dir)
	defer unlock()
	d.mu.Lock()
	b := s.box
	s.box = nil
	delete(d.hadBox, dir)
	d.mu.Unlock()
	if b != nil {
		b.stop()
	}
	d.closeEgress(ctx, s.id, tenant, session)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove workspace: %w", err)
	}
	return nil
}
