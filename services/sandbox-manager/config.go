package sandboxmanager

import (
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"corral.dev/pkg/credential"
	"corral.dev/pkg/envconf"
	"corral.dev/pkg/event"
)

// Config is the sandbox-manager's configuration, read from the environment
// by [LoadConfig].
type Config struct {
	// NATSURL is the NATS server to connect to (CORRAL_NATS_URL).
	NATSURL string
	// DataDir holds the workspaces, under DataDir/workspaces
	// (CORRAL_DATA_DIR).
	DataDir string
	// Bwrap is the bubblewrap binary (CORRAL_BWRAP; default bwrap on PATH).
	Bwrap string
	// Concurrency is how many calls run at once (CORRAL_SANDBOX_CONCURRENCY).
	Concurrency int
	// TenantConcurrency is how many calls of one tenant run at once
	// (CORRAL_SANDBOX_TENANT_CONCURRENCY, default a quarter of
	// Concurrency, at least 1), so that one tenant cannot take every
	// slot; its other calls wait, holding none.
	TenantConcurrency int
	// DefaultTimeout is a Bash call's timeout when it gives none
	// (CORRAL_SANDBOX_TIMEOUT, a Go duration).
	DefaultTimeout time.Duration
	// SetupTimeout bounds an environment's setup, which runs once per
	// version of its definition (CORRAL_SANDBOX_SETUP_TIMEOUT, a Go
	// duration; default 20m): one that runs longer is stopped, and fails
	// the session that needed it.
	SetupTimeout time.Duration
	// FileTimeout bounds each Read, Write, Edit, Glob and Grep call
	// (CORRAL_SANDBOX_FILE_TIMEOUT, a Go duration; default 30s).
	FileTimeout time.Duration
	// IdleTimeout suspends a session's sandbox after this long without
	// calls (CORRAL_SANDBOX_IDLE_TIMEOUT, a Go duration): its processes
	// are stopped until the next call.
	IdleTimeout time.Duration
	// StopTimeout stops a suspended sandbox after this long
	// (CORRAL_SANDBOX_STOP_TIMEOUT); its workspace stays.
	StopTimeout time.Duration
	// MaxSuspended caps the suspended sandboxes; past it the one
	// suspended longest is stopped (CORRAL_SANDBOX_MAX_SUSPENDED).
	MaxSuspended int
	// PoolSize is how many sandboxes are kept started ahead for each of
	// the tenants that started one lately (CORRAL_SANDBOX_POOL, default
	// 2; 0 keeps none), so that a session's first call takes one instead
	// of waiting for a sandbox to start.
	PoolSize int
	// Instance names this sandbox-manager process in call marks.
	Instance string
	// Node names this sandbox-manager in placements: the sessions whose
	// sandboxes live here (CORRAL_SANDBOX_NODE; default a name made once
	// and kept in DataDir/node, so a restart over the same data directory
	// is the same node, with its sessions' workspaces).
	Node string
	// ShutdownGrace is how long running calls may finish at shutdown
	// before they are killed (CORRAL_SHUTDOWN_GRACE, a Go duration).
	ShutdownGrace time.Duration
	// Limits of each sandbox (zero: the sandbox package's defaults):
	// CORRAL_SANDBOX_MEMORY_BYTES (the whole sandbox's memory with a
	// memory cgroup, and each process's address space),
	// CORRAL_SANDBOX_CPUS (CPUs' worth of time, with a cpu cgroup),
	// CORRAL_SANDBOX_PROCESSES, CORRAL_SANDBOX_CPU_SECONDS (of each
	// process), CORRAL_SANDBOX_FILE_BYTES (largest file),
	// CORRAL_SANDBOX_OPEN_FILES.
	MemoryBytes, FileBytes int64
	CPUs                   float64
	Processes, CPUSeconds  int
	OpenFiles              int
	// NodeMemoryBytes and NodeCPUs bound all the node's sandboxes together
	// (CORRAL_SANDBOX_NODE_MEMORY_BYTES, CORRAL_SANDBOX_NODE_CPUS; default
	// unbounded), with the cgroup that holds theirs.
	NodeMemoryBytes int64
	NodeCPUs        float64
	// SandboxUID and SandboxGID are the host user and group that
	// sandboxes run as when the sandbox-manager runs as root
	// (CORRAL_SANDBOX_UID, CORRAL_SANDBOX_GID; default 65534 and 65534,
	// nobody and nogroup): root in a sandbox is that unprivileged user on
	// the host, and owns the workspaces' files. A sandbox-manager that is
	// not root runs sandboxes as itself and ignores them.
	SandboxUID, SandboxGID int

	// WorkspaceBytes bounds what a session's workspace may hold
	// (CORRAL_SANDBOX_WORKSPACE_BYTES, default 10 GiB): a call that leaves
	// it over the limit fails, saying so.
	WorkspaceBytes int64
	// WorkspaceFiles bounds the files, directories and links a session's
	// workspace may hold (CORRAL_SANDBOX_WORKSPACE_FILES, default
	// 50,000): a call that leaves more fails, saying so, and is not
	// snapshotted. It bounds the walk after each call and the manifest
	// (about 100 bytes an entry).
	WorkspaceFiles int
	// SnapshotBytes bounds the bytes of new or changed files a session's
	// snapshots may upload within an hour (CORRAL_SANDBOX_SNAPSHOT_BYTES,
	// default 20 GiB): a call past it fails, saying so, and is not
	// snapshotted until the session's uploads fit again.
	SnapshotBytes int64
	// BlobGrace is how long a stored file no snapshot names is kept
	// before the sweep collects it (CORRAL_SANDBOX_BLOB_GRACE, default
	// 1h): a snapshot must be written within half of it.
	BlobGrace time.Duration
	// Snapshots keeps each workspace in the object store after every call
	// that may change it, so that any node can take a session over
	// (CORRAL_SANDBOX_SNAPSHOTS=off turns them off).
	Snapshots bool
	// ReapInterval is how often the reaper looks for workspaces no
	// session needs (CORRAL_SANDBOX_REAP_INTERVAL, default 10m); it also
	// runs at start.
	ReapInterval time.Duration
	// WorkspaceTTL is how long a workspace with no call stays here when
	// snapshots are on (CORRAL_SANDBOX_WORKSPACE_TTL, default 168h): the
	// session's next call restores it from its snapshot.
	WorkspaceTTL time.Duration
	// CallKey is the harness's public key for calls
	// (CORRAL_CALL_PUBLIC_KEY): a call runs only if it verifies the
	// harness's signature of it. Nil runs unsigned calls, for tests of the
	// service alone.
	CallKey ed25519.PublicKey
	// EgressSocket is the control socket of the node's egress service
	// (CORRAL_EGRESS_SOCKET, an absolute path; default none): each
	// session's sandbox gets network through it where the service's
	// policy may let it reach a host. Without it no sandbox has network.
	EgressSocket string
	// Metrics is where the service's metrics are registered (none are
	// served when nil).
	Metrics prometheus.Registerer
	// Clients is the account the workspace API's requests must come
	// from, through its imports ([credential.AccountClients]); empty takes
	// them from anywhere, for tests on a server without accounts.
	Clients string
}

// LoadConfig reads the configuration from getenv, applies defaults and
// validates it; an error names the offending variable.
func LoadConfig(getenv func(string) string) (Config, error) {
	cfg := Config{
		NATSURL: envconf.NATSURL(getenv),
		DataDir: getenv("CORRAL_DATA_DIR"),
		Bwrap:   getenv("CORRAL_BWRAP"),
		Clients: credential.AccountClients,
	}
	host, _ := os.Hostname()
	cfg.Instance = fmt.Sprintf("%s-%d", host, os.Getpid())
	// Without a name, the node's is made once and kept in the data
	// directory, by New: loading the configuration writes nothing.
	if cfg.Node = getenv("CORRAL_SANDBOX_NODE"); cfg.Node != "" && !nodeRE.MatchString(cfg.Node) {
		return Config{}, fmt.Errorf("CORRAL_SANDBOX_NODE=%q: want lower-case letters, digits, - and _ (at most 63)", cfg.Node)
	}
	if cfg.DataDir == "" {
		dir, err := DefaultDataDir()
		if err != nil {
			return Config{}, fmt.Errorf("CORRAL_DATA_DIR is unset and %w", err)
		}
		cfg.DataDir = dir
	}
	var err error
	if cfg.Concurrency, err = envconf.Int(getenv, "CORRAL_SANDBOX_CONCURRENCY", 32); err != nil {
		return Config{}, err
	}
	if cfg.TenantConcurrency, err = envconf.Int(getenv, "CORRAL_SANDBOX_TENANT_CONCURRENCY", max(1, (cfg.Concurrency+3)/4)); err != nil {
		return Config{}, err
	}
	if cfg.TenantConcurrency > cfg.Concurrency {
		return Config{}, fmt.Errorf("CORRAL_SANDBOX_TENANT_CONCURRENCY=%d: want a positive whole number, at most CORRAL_SANDBOX_CONCURRENCY (%d)", cfg.TenantConcurrency, cfg.Concurrency)
	}
	for _, v := range []struct {
		name string
		to   *time.Duration
		def  time.Duration
	}{
		{"CORRAL_SANDBOX_TIMEOUT", &cfg.DefaultTimeout, 2 * time.Minute},
		{"CORRAL_SANDBOX_SETUP_TIMEOUT", &cfg.SetupTimeout, 20 * time.Minute},
		{"CORRAL_SANDBOX_FILE_TIMEOUT", &cfg.FileTimeout, 0},
		{"CORRAL_SANDBOX_IDLE_TIMEOUT", &cfg.IdleTimeout, 0},
		{"CORRAL_SANDBOX_STOP_TIMEOUT", &cfg.StopTimeout, 0},
		{"CORRAL_SANDBOX_REAP_INTERVAL", &cfg.ReapInterval, 10 * time.Minute},
		{"CORRAL_SANDBOX_WORKSPACE_TTL", &cfg.WorkspaceTTL, 7 * 24 * time.Hour},
		{"CORRAL_SANDBOX_BLOB_GRACE", &cfg.BlobGrace, time.Hour},
		{"CORRAL_SHUTDOWN_GRACE", &cfg.ShutdownGrace, 10 * time.Second},
	} {
		if *v.to, err = envconf.Duration(getenv, v.name, v.def); err != nil {
			return Config{}, err
		}
	}
	if cfg.Snapshots, err = envconf.Switch(getenv, "CORRAL_SANDBOX_SNAPSHOTS", true); err != nil {
		return Config{}, err
	}
	for _, v := range []struct {
		name string
		to   *int64
		def  int64
	}{
		{"CORRAL_SANDBOX_MEMORY_BYTES", &cfg.MemoryBytes, 0},
		{"CORRAL_SANDBOX_FILE_BYTES", &cfg.FileBytes, 0},
		{"CORRAL_SANDBOX_NODE_MEMORY_BYTES", &cfg.NodeMemoryBytes, 0},
		{"CORRAL_SANDBOX_WORKSPACE_BYTES", &cfg.WorkspaceBytes, 10 << 30},
		{"CORRAL_SANDBOX_SNAPSHOT_BYTES", &cfg.SnapshotBytes, 20 << 30},
	} {
		if *v.to, err = envconf.Bytes(getenv, v.name, v.def); err != nil {
			return Config{}, err
		}
	}
	// A number of CPUs is read here alone.
	for _, v := range []struct {
		name string
		to   *float64
	}{
		{"CORRAL_SANDBOX_CPUS", &cfg.CPUs},
		{"CORRAL_SANDBOX_NODE_CPUS", &cfg.NodeCPUs},
	} {
		if s := getenv(v.name); s != "" {
			n, err := strconv.ParseFloat(s, 64)
			if err != nil || !(n >= 0.01) || math.IsInf(n, 0) { // NaN is no number of CPUs
				return Config{}, fmt.Errorf("%s=%q: want a number of CPUs, at least 0.01", v.name, s)
			}
			*v.to = n
		}
	}
	if cfg.PoolSize, err = envconf.Count(getenv, "CORRAL_SANDBOX_POOL", 2); err != nil {
		return Config{}, err
	}
	for _, v := range []struct {
		name string
		to   *int
		def  int
	}{
		{"CORRAL_SANDBOX_PROCESSES", &cfg.Processes, 0},
		{"CORRAL_SANDBOX_CPU_SECONDS", &cfg.CPUSeconds, 0},
		{"CORRAL_SANDBOX_OPEN_FILES", &cfg.OpenFiles, 0},
		{"CORRAL_SANDBOX_MAX_SUSPENDED", &cfg.MaxSuspended, 0},
		{"CORRAL_SANDBOX_WORKSPACE_FILES", &cfg.WorkspaceFiles, 50_000},
		{"CORRAL_SANDBOX_UID", &cfg.SandboxUID, 0},
		{"CORRAL_SANDBOX_GID", &cfg.SandboxGID, 0},
	} {
		if *v.to, err = envconf.Int(getenv, v.name, v.def); err != nil {
			return Config{}, err
		}
	}
	if cfg.CallKey, err = event.LoadCallKey(getenv); err != nil {
		return Config{}, err
	}
	if cfg.EgressSocket = getenv("CORRAL_EGRESS_SOCKET"); cfg.EgressSocket != "" && !filepath.IsAbs(cfg.EgressSocket) {
		return Config{}, fmt.Errorf("CORRAL_EGRESS_SOCKET=%q: want an absolute path", cfg.EgressSocket)
	}
	return cfg, nil
}

var nodeRE = regexp.MustCompile(`^[a-z0-9_-]{1,63}$`)

// nodeName returns the node name kept in dir/node, making one, and
// dir, if there is none.
func nodeName(dir string) (string, error) {
	file := filepath.Join(dir, "node")
	if b, err := os.ReadFile(file); err == nil {
		if name := strings.TrimSpace(string(b)); nodeRE.MatchString(name) {
			return name, nil
		}
		return "", fmt.Errorf("%s holds %q, not a node name: remove it to have a new one made", file, b)
	}
	host, _ := os.Hostname()
	host = strings.Trim(regexp.MustCompile(`[^a-z0-9-]+`).ReplaceAllString(strings.ToLower(host), "-"), "-")
	name := strings.ToLower(rand.Text()[:8])
	if host != "" {
		name = host[:min(len(host), 40)] + "-" + name
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("CORRAL_DATA_DIR: %w", err)
	}
	if err := os.WriteFile(file, []byte(name+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("keep the node name: %w", err)
	}
	return name, nil
}

// DefaultDataDir is the per-user directory Corral keeps its state in:
// $XDG_STATE_HOME/corral, or ~/.local/state/corral.
func DefaultDataDir() (string, error) {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "corral"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no home directory: %w", err)
	}
	return filepath.Join(home, ".local", "state", "corral"), nil
}
