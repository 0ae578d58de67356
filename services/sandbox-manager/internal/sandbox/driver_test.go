package sandbox

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"corral.dev/pkg/egressapi"
	"corral.dev/pkg/tool"
	"github.com/google/uuid"
)

const tenant = "acme"

// newDriver returns a Driver on a fresh directory. Where bwrap cannot build
// sandboxes it skips the test, except in CI, where it fails.
func newDriver(t testing.TB, cfg Config) *Driver {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	d, err := New(cfg)
	if err != nil {
		if os.Getenv("CI") == "" && (errors.Is(err, ErrNoBwrap) || errors.Is(err, ErrSandboxUnavailable)) {
			t.Skipf("no usable bwrap here: %v", err)
		}
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(d.Close)
	return d
}

// who is a session of tenant as a call names it, with user ada.
func who(tenant string, session uuid.UUID) egressapi.Identity {
	return egressapi.Identity{Tenant: tenant, User: "ada", Session: session}
}

// run runs one call for tenant "acme" and fails the test on a Go error.
func run(t *testing.T, d *Driver, session uuid.UUID, args any) Result {
	t.Helper()
	res, err := d.Run(t.Context(), who(tenant, session), args)
	if err != nil {
		t.Fatalf("Run(%#v): %v", args, err)
	}
	return res
}

// bash runs a Bash command with the default timeout.
func bash(t *testing.T, d *Driver, session uuid.UUID, command string) Result {
	t.Helper()
	return run(t, d, session, &tool.BashArgs{Command: command})
}

func TestNewMissingBwrap(t *testing.T) {
	t.Parallel()
	_, err := New(Config{Dir: t.TempDir(), Bwrap: "/nonexistent/bwrap"})
	if !errors.Is(err, ErrNoBwrap) {
		t.Fatalf("New with a missing bwrap: got %v, want an error wrapping ErrNoBwrap", err)
	}
	if !strings.Contains(err.Error(), "install bubblewrap") {
		t.Errorf("error %q does not say how to install bwrap", err)
	}
}

func TestNewInvalidConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
	}{
		{"no dir", Config{}},
		{"dir under usr", Config{Dir: "/usr/lib/corral"}},
		{"dir under etc", Config{Dir: "/etc/corral"}},
		{"default above max", Config{Dir: t.TempDir(), DefaultTimeout: time.Hour, MaxTimeout: time.Minute}},
		{"negative output limit", Config{Dir: t.TempDir(), OutputLimit: -1}},
		{"tiny memory", Config{Dir: t.TempDir(), MemoryBytes: 1000}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := New(tc.cfg); err == nil {
				t.Errorf("New(%+v) = nil error, want one", tc.cfg)
			}
		})
	}
}

func TestRunRejectsBadCalls(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{})
	session := uuid.New()
	tests := []struct {
		name    string
		tenant  string
		session uuid.UUID
		args    any
	}{
		{"empty tenant", "", session, &tool.BashArgs{Command: "true"}},
		{"upper case tenant", "Acme", session, &tool.BashArgs{Command: "true"}},
		{"dot dot tenant", "..", session, &tool.BashArgs{Command: "true"}},
		{"slash in tenant", "a/b", session, &tool.BashArgs{Command: "true"}},
		{"leading dash", "-a", session, &tool.BashArgs{Command: "true"}},
		{"long tenant", strings.Repeat("a", 64), session, &tool.BashArgs{Command: "true"}},
		{"nil session", tenant, uuid.Nil, &tool.BashArgs{Command: "true"}},
		{"unknown args", tenant, session, tool.BashArgs{Command: "true"}},
	}
	// The group returns once its parallel subtests are done.
	t.Run("calls", func(t *testing.T) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				if _, err := d.Run(t.Context(), who(tc.tenant, tc.session), tc.args); err == nil {
					t.Errorf("Run(%q, %s, %T) = nil error, want one", tc.tenant, tc.session, tc.args)
				}
			})
		}
	})
	entries, err := os.ReadDir(d.cfg.Dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != emptyDir && e.Name() != executorName {
			t.Errorf("rejected calls left %s in the data dir", e.Name())
		}
	}
}

func TestWorkspaceCreatedAndDestroyed(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{})
	session := uuid.New()
	ws := d.Workspace(tenant, session)
	if want := filepath.Join(d.cfg.Dir, tenant, session.String()); ws != want {
		t.Fatalf("Workspace = %q, want %q", ws, want)
	}
	run(t, d, session, &tool.WriteArgs{FilePath: "f.txt", Content: "x"})
	// The manager's own, or, run as root, the sandbox user's alone.
	perm := fs.FileMode(0o755)
	if d.owner != nil {
		perm = 0o700
	}
	if fi, err := os.Stat(ws); err != nil || fi.Mode().Perm() != perm {
		t.Fatalf("workspace after first call: %v, %v; want a %04o directory", fi, err, perm)
	}
	if err := d.Destroy(t.Context(), tenant, session); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if _, err := os.Stat(ws); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("workspace after Destroy: stat error %v, want not exist", err)
	}
	if err := d.Destroy(t.Context(), tenant, session); err != nil {
		t.Errorf("second Destroy: %v", err)
	}
	if err := d.Destroy(t.Context(), "Bad", session); err == nil {
		t.Error("Destroy with an invalid tenant: nil error")
	}
}

// Two calls of one session must not overlap: whichever runs first, the log
// holds its start and end together.
func TestSessionCallsSerialised(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{})
	session := uuid.New()
	var wg sync.WaitGroup
	for _, cmd := range []string{
		"echo start >> log; sleep 0.3; echo end >> log",
		"echo other >> log",
	} {
		wg.Go(func() {
			if res, err := d.Run(t.Context(), who(tenant, session), &tool.BashArgs{Command: cmd}); err != nil || res.IsError {
				t.Errorf("Run(%q) = %+v, %v", cmd, res, err)
			}
		})
	}
	wg.Wait()
	got, err := os.ReadFile(filepath.Join(d.Workspace(tenant, session), "log"))
	if err != nil {
		t.Fatal(err)
	}
	if s := string(got); s != "start\nend\nother\n" && s != "other\nstart\nend\n" {
		t.Errorf("log = %q, want the calls one after the other", s)
	}
}

// A call waiting for its session gives up when its context ends.
func TestRunWaitRespectsContext(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{})
	session := uuid.New()
	_, unlock := d.lockWait(d.Workspace(tenant, session))
	defer unlock()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := d.Run(ctx, who(tenant, session), &tool.BashArgs{Command: "true"}); !errors.Is(err, context.Canceled) {
		t.Errorf("Run on a busy session with a cancelled context: got %v, want context.Canceled", err)
	}
}
