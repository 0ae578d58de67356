package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"corral.dev/pkg/egressapi"
)

// Config configures a [Driver]. Zero values take the defaults noted on each field.
type Config struct {
	// Dir is the host directory holding the workspaces, as Dir/<tenant>/<session>.
	// It is required, and must not lie inside a directory the sandbox sees
	// (/usr, /etc, /bin, /sbin or the /lib directories). It is created 0o700
	// if missing (see User for what a manager run as root adds).
	Dir string
	// Bwrap is the path of the bwrap binary; "" looks up "bwrap" in PATH.
	Bwrap string
	// DefaultTimeout bounds a Bash call that gives no timeout (default 2m).
	DefaultTimeout time.Duration
	// MaxTimeout caps the timeout a Bash call may ask for (default 10m).
	MaxTimeout time.Duration
	// OutputLimit is how many bytes of a Bash or Grep call's output reach the
	// model (default 30000); the rest is counted and dropped.
	OutputLimit int
	// LiveLimit is how many bytes of a Bash call's output its caller hears
	// as they are written, when it listens ([Driver.RunWithOutput])
	// (default 1 MiB); past it the call goes on unheard, and its result
	// is the same.
	LiveLimit int
	// CPUSeconds is RLIMIT_CPU for each process of a Bash call (default 300).
	CPUSeconds int
	// MemoryBytes bounds each sandbox's memory (default 4 GiB): all its
	// processes and its /tmp, /dev/shm and HOME together, with a memory
	// cgroup of its own, where the manager may make cgroups; past it the
	// kernel kills one of its processes and the call says the sandbox ran
	// out of memory. It is also every process's RLIMIT_AS (its address space,
	// applied in KiB, rounded down), the only bound without the cgroup.
	MemoryBytes int64
	// CPUs bounds the CPU time each sandbox gets, in CPUs' worth (default
	// 1: one CPU's time, spread over any number of them), with a cpu
	// cgroup of its own where the manager may make cgroups; none without.
	CPUs float64
	// NodeMemoryBytes and NodeCPUs bound all the sandboxes of the Driver
	// together, with the cgroup that holds theirs (default 0: unbounded,
	// but for the host's own limits).
	NodeMemoryBytes int64
	NodeCPUs        float64

	// FileSizeBytes is RLIMIT_FSIZE, the largest file a process may write
	// (default 1 GiB). It is applied in 512-byte blocks, rounded down.
	FileSizeBytes int64
	// OpenFiles is RLIMIT_NOFILE (default 1024).
	OpenFiles int
	// Processes caps each sandbox's processes (default 512) with a pids
	// cgroup of its own, where the manager may make cgroups (as root):
	// its commands may run this many, threads and each call's shell
	// counted, beside the sandbox's own (see ownPids). It
	// is also every command's RLIMIT_NPROC, which the kernel counts per host
	// user across the whole machine, not per sandbox, and never enforces for
	// host root: without the cgroup it bounds, at best, all sandboxes
	// together. Run as root, with the cgroup, it is left unbounded: all
	// sandboxes are then one host user (see User), whose processes it
	// would count together.
	Processes int
	// TmpSize is the size in bytes of each of the sandbox's private /tmp,
	// /dev/shm and HOME, /home/sandbox (default 256 MiB). HOME holds the
	// tools' caches (Go's module and build caches, npm's, pip's).
	TmpSize int64
	// IdleTimeout is how long a session's sandbox stays up after its last
	// call (default 5m). It is then suspended: its processes are stopped,
	// using no CPU, and the next call resumes them in well under a
	// millisecond. Without a pids cgroup to find them by (the manager may
	// not make cgroups) it is stopped instead.
	IdleTimeout time.Duration
	// StopTimeout is how long a sandbox stays suspended before it is
	// stopped (default 30m), freeing its memory. The next call after that
	// starts a new sandbox: /workspace is kept, /tmp, /dev/shm and HOME
	// start empty.
	StopTimeout time.Duration
	// MaxSuspended caps the suspended sandboxes (default 1000): past it,
	// the one suspended longest is stopped.
	MaxSuspended int
	// PoolSize is how many sandboxes are kept started ahead for each
	// tenant that started one lately (see pool.go); 0, the default, keeps
	// none.
	PoolSize int
	// User and Group are the host user and group that sandboxes run as
	// when the manager runs as root (default 65534 and 65534, nobody and
	// nogroup; 0 takes the default): root in a sandbox is that user on
	// the host, which owns the files the sandbox makes. The workspaces'
	// directory and its ancestors must let that user through: those that
	// do not are given an ACL entry granting it search permission alone.
	// A manager that is not root runs sandboxes as itself.
	User, Group int
	// Skills, if set, returns a host directory holding the tenant's
	// skills, bound read-only at /skills in each sandbox it starts ("" for
	// none: /skills is then empty).
	Skills func(ctx context.Context, tenant string) (string, error)
	// FileTimeout bounds each Read, Write, Edit, Glob and Grep call
	// (default 30s): one that reaches it stops, and the model is told so
	// with what it found until then.
	FileTimeout time.Duration
	// WalkEntries caps the files and directories one Glob or Grep call
	// looks at (default 100000).
	WalkEntries int
	// OnStart, if set, is told of every sandbox started or resumed and how
	// long it took: see [StartCold], [StartResume] and [StartRestart].
	OnStart func(kind string, took time.Duration)
	// Egress, if set, is the node's egress service, which gives sandboxes
	// their only way out (see egress.go); nil gives no sandbox any
	// network. The directories it binds into sandboxes, and their
	// ancestors, must let the sandbox user (see User) through, and their
	// sockets must accept its connections.
	Egress Egress
	// Layer, if set, returns the layer of the environment of the session
	// id names, when its sandbox is about to start: the host directory
	// bound read-only at /opt/env (package environment's Mount), with the
	// layer's directories first on PATH and its variables, and the
	// environment's name and version, which go to the egress service
	// with id. The zero Layer is none. Its ctx is the call's. A sandbox
	// with a layer never comes from the pool; an error fails the call
	// before anything runs ([ErrNotRun]). The directory and its
	// ancestors must let the sandbox user (see User) through. A layer
	// changes only between sandboxes: one started keeps its own.
	Layer func(ctx context.Context, id egressapi.Identity) (Layer, error)
	// Logger is told what the Driver handles without failing a call (an
	// egress summary it could not get, say); nil discards it.
	Logger *slog.Logger
}

// Kinds of sandbox start told to [Config.OnStart].
const (
	// StartCold is a new sandbox on a new workspace.
	StartCold = "cold"
	// StartResume is a suspended sandbox thawed.
	StartResume = "resume"
	// StartRestart is a new sandbox on a workspace kept from before: its
	// sandbox was stopped when idle or lost, or the manager restarted.
	StartRestart = "restart"
)

// Defaults applied by [New] to zero fields of [Config].
const (
	DefaultTimeout     = 2 * time.Minute
	DefaultMaxTimeout  = 10 * time.Minute
	DefaultOutputLimit = 30000
	DefaultLiveLimit   = 1 << 20
	DefaultCPUSeconds  = 300
	DefaultMemoryBytes = 4 << 30
	DefaultCPUs        = 1
	DefaultFileSize    = 1 << 30
	DefaultOpenFiles   = 1024
	DefaultProcesses   = 512
	DefaultTmpSize     = 256 << 20
	DefaultIdleTimeout = 5 * time.Minute
	DefaultStopTimeout = 30 * time.Minute
	DefaultSuspended   = 1000
	DefaultFileTimeout = 30 * time.Second
	DefaultWalkEntries = 100_000
)

// withDefaults returns c with zero fields set to their defaults and Dir made absolute.
func (c Config) withDefaults() (Config, error) {
	if c.DefaultTimeout == 0 {
		c.DefaultTimeout = DefaultTimeout
	}
	if c.MaxTimeout == 0 {
		c.MaxTimeout = DefaultMaxTimeout
	}
	if c.OutputLimit == 0 {
		c.OutputLimit = DefaultOutputLimit
	}
	if c.LiveLimit == 0 {
		c.LiveLimit = DefaultLiveLimit
	}
	if c.CPUs == 0 {
		c.CPUs = DefaultCPUs
	}
	if c.CPUSeconds == 0 {
		c.CPUSeconds = DefaultCPUSeconds
	}
	if c.MemoryBytes == 0 {
		c.MemoryBytes = DefaultMemoryBytes
	}
	if c.FileSizeBytes == 0 {
		c.FileSizeBytes = DefaultFileSize
	}
	if c.OpenFiles == 0 {
		c.OpenFiles = DefaultOpenFiles
	}
	if c.Processes == 0 {
		c.Processes = DefaultProcesses
	}
	if c.TmpSize == 0 {
		c.TmpSize = DefaultTmpSize
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.StopTimeout == 0 {
		c.StopTimeout = DefaultStopTimeout
	}
	if c.FileTimeout == 0 {
		c.FileTimeout = DefaultFileTimeout
	}
	if c.WalkEntries == 0 {
		c.WalkEntries = DefaultWalkEntries
	}
	if c.User == 0 {
		c.User = DefaultUser
	}
	if c.Group == 0 {
		c.Group = DefaultGroup
	}
	if c.MaxSuspended == 0 {
		c.MaxSuspended = DefaultSuspended
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Dir != "" {
		abs, err := filepath.Abs(c.Dir)
		if err != nil {
			return c, fmt.Errorf("dir %q: %w", c.Dir, err)
		}
		c.Dir = abs
	}
	return c, nil
}

// validate reports the first field of c that is out of range.
func (c Config) validate() error {
	switch {
	case c.Dir == "":
		return errors.New("dir is required")
	case c.DefaultTimeout < 0 || c.MaxTimeout < 0 || c.IdleTimeout < 0 || c.StopTimeout < 0 || c.MaxSuspended < 0 || c.PoolSize < 0:
		return errors.New("timeouts must not be negative")
	case c.DefaultTimeout > c.MaxTimeout:
		return fmt.Errorf("default timeout %s exceeds max timeout %s", c.DefaultTimeout, c.MaxTimeout)
	case c.FileTimeout < 0 || c.WalkEntries < 0:
		return errors.New("file timeout and walk entries must not be negative")
	case c.OutputLimit < 0 || c.LiveLimit < 0:
		return errors.New("output and live limits must not be negative")
	case c.User < 0 || c.Group < 0:
		return errors.New("user and group must not be negative")
	case c.CPUSeconds < 0 || c.OpenFiles < 0 || c.Processes < 0:
		return errors.New("cpu seconds, open files and processes must not be negative")
	case c.MemoryBytes < 1<<20:
		return fmt.Errorf("memory bytes %d is below 1 MiB", c.MemoryBytes)
	case c.FileSizeBytes < 512:
		return fmt.Errorf("file size bytes %d is below 512", c.FileSizeBytes)
	case c.TmpSize < 0:
		return errors.New("tmp size must not be negative")
	case c.CPUs < 0.01 || c.NodeCPUs < 0 || c.NodeMemoryBytes < 0:
		return errors.New("cpus must be at least 0.01, and node bounds must not be negative")
	}
	// The sandbox sees these trees, so the workspaces must live elsewhere.
	dir := c.Dir
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	for _, p := range visibleTrees() {
		if dir == p || strings.HasPrefix(dir, p+string(os.PathSeparator)) {
			return fmt.Errorf("dir %s is inside %s, which sandboxes can see", c.Dir, p)
		}
	}
	return nil
}

// visibleTrees lists the host trees bound into every sandbox, with symlinks resolved.
func visibleTrees() []string {
	var trees []string
	for _, p := range append([]string{"/usr", "/etc"}, libDirs...) {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			trees = append(trees, real)
		}
	}
	return trees
}
