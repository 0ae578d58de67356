package sandbox

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// needCgroup skips the test where the manager may make no cgroups at all
// (not root, no delegated subtree), and fails it where it may make some
// but not one of controller: that one was left out.
func needCgroup(t *testing.T, d *Driver, controller string) {
	t.Helper()
	ctls, why := d.Cgroups()
	if len(ctls) == 0 {
		t.Skipf("no cgroups for sandboxes here: %v", why)
	}
	if !d.cgroups.has(controller) {
		t.Fatalf("sandboxes have cgroups %v but no %s cgroup: %v", ctls, controller, why)
	}
}

// Several processes, each well under the address-space limit, together
// go over the sandbox's memory limit: the kernel kills one, and the call
// says the sandbox ran out of memory, though an earlier call found no
// kill. The next call works.
func TestMemoryCappedPerSandbox(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{MemoryBytes: 128 << 20})
	needCgroup(t, d, "memory")
	session := uuid.New()
	// A call before: the count of kills, read after it, is read again
	// from the file kept open since.
	if res := bash(t, d, session, "true"); res.IsError {
		t.Fatalf("true: %+v", res)
	}
	// 4 × 48 MiB, each written to so that it is really used.
	res := bash(t, d, session, `for i in 1 2 3 4; do python3 -c 'import time; b = b"x" * (48 << 20); time.sleep(3)' & done; wait; echo done`)
	if !res.IsError || !strings.Contains(res.Output, "The sandbox ran out of memory: it may use 128 MiB in all") {
		t.Errorf("four processes of 48 MiB under a 128 MiB limit: %+v, want an out-of-memory error", res)
	}
	if res := bash(t, d, session, "echo alive"); res.IsError || res.Output != "alive\n" {
		t.Errorf("the call after: %+v", res)
	}
}

// A call's processes, and what they start, are the kernel's first choice
// when the sandbox runs out of memory; the executor, which the sandbox
// cannot lose, is not. (Where bash is missing, the /bin/sh that starts each
// call sets its score first: see shellArgs and TestShellFallbackLimits.)
func TestCallsAreKilledBeforeTheExecutor(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{})
	session := uuid.New()
	for i := range 2 { // the first call's shell, and one started ahead
		res := bash(t, d, session, "cat /proc/self/oom_score_adj /proc/$$/oom_score_adj /proc/1/oom_score_adj")
		if want := "1000\n1000\n0\n"; res.Output != want {
			t.Errorf("call %d: the scores of a command, its shell and the executor = %q, want %q", i, res.Output, want)
		}
	}
}

// Each sandbox's CPU time is bounded by its cpu cgroup, and all of them
// together by the node's.
func TestCPUCappedPerSandbox(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{CPUs: 0.5, NodeCPUs: 1.5, NodeMemoryBytes: 8 << 30})
	needCgroup(t, d, "cpu")
	session := uuid.New()
	bash(t, d, session, "true")
	g := liveSandbox(d, session).cgroup
	tests := []struct {
		name string
		dir  string
		want string
	}{
		{"sandbox", g.dirs["cpu"], "50000"},
		{"node", d.cgroups.parent["cpu"], "150000"},
	}
	for _, tc := range tests {
		if got := cpuQuota(t, g.v2, tc.dir); got != tc.want {
			t.Errorf("%s cpu quota = %q, want %q per 100ms", tc.name, got, tc.want)
		}
	}
	if got := memoryMax(t, g.v2, d.cgroups.parent["memory"]); got != fmt.Sprint(8<<30) {
		t.Errorf("node memory limit = %q, want %d", got, 8<<30)
	}
}

func cpuQuota(t *testing.T, v2 bool, dir string) string {
	t.Helper()
	if v2 {
		quota, _, _ := strings.Cut(readTrim(t, filepath.Join(dir, "cpu.max")), " ")
		return quota
	}
	return readTrim(t, filepath.Join(dir, "cpu.cfs_quota_us"))
}

func memoryMax(t *testing.T, v2 bool, dir string) string {
	t.Helper()
	if v2 {
		return readTrim(t, filepath.Join(dir, "memory.max"))
	}
	return readTrim(t, filepath.Join(dir, "memory.limit_in_bytes"))
}

func readTrim(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// The seccomp filter fails these system calls with EPERM. Each is called
// with arguments under which it would succeed, or fail otherwise than with
// EPERM, without the filter.
func TestSeccompDenies(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{})
	if res := bash(t, d, uuid.New(), "command -v python3"); res.IsError {
		t.Skip("no python3 in the sandbox")
	}
	tests := []struct {
		name string
		call string // arguments of syscall(2)
	}{
		{"io_uring_setup", "425, 0, 0"},             // EINVAL: no entries
		{"userfaultfd", "323, 1"},                   // UFFD_USER_MODE_ONLY: allowed
		{"bpf", "321, 0, 0, 0"},                     // EFAULT, or EPERM where unprivileged bpf is off
		{"keyctl", "250, 0, -3, 0"},                 // KEYCTL_GET_KEYRING_ID of the session keyring
		{"perf_event_open", "298, 0, 0, -1, -1, 0"}, // EFAULT: no attributes
		{"ptrace", "101, 0, 0, 0, 0"},               // PTRACE_TRACEME
		{"mount", "165, 0, 0, 0, 0, 0"},             // EFAULT
		{"personality", "135, 0x0400000"},           // READ_IMPLIES_EXEC
	}
	t.Run("calls", func(t *testing.T) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				script := fmt.Sprintf("import ctypes; libc = ctypes.CDLL(None, use_errno=True); r = libc.syscall(%s); print(r, ctypes.get_errno())", tc.call)
				res := bash(t, d, uuid.New(), "python3 -c '"+script+"'")
				if res.Output != "-1 1\n" { // EPERM
					t.Errorf("%s: %+v, want -1 with EPERM", tc.name, res)
				}
			})
		}
	})
}

// A set-user-ID binary in the workspace runs with its caller's
// credentials: the workspace is mounted nosuid, and bwrap sets no_new_privs.
func TestSetUIDIgnored(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{})
	session := uuid.New()
	bash(t, d, session, "true")
	src, err := os.Open("/bin/cat")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	p := filepath.Join(d.Workspace(tenant, session), "cat")
	dst, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	dst.Close()
	if err := os.Chown(p, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o4755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	res := bash(t, d, session, `grep -E '^(Uid|CapEff)' /proc/self/status > want; ./cat /proc/self/status | grep -E '^(Uid|CapEff)' > got; cmp want got && grep -q ' /workspace .*nosuid' /proc/self/mountinfo && echo same`)
	if res.IsError || res.Output != "same\n" {
		t.Errorf("a set-uid root binary: %+v, want the caller's credentials", res)
	}
}
