package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// With a pids cgroup per sandbox, a sandbox runs at most Processes
// processes of its commands, beside its own (ownPids, which its threads
// count against too), whoever runs the manager: a fork bomb fills only
// its own sandbox, and the next call works.
func TestProcessesCappedPerSandbox(t *testing.T) {
	d := newDriver(t, Config{Processes: 32})
	if ok, why := d.ProcessesConfined(); !ok {
		t.Skipf("no pids cgroup for sandboxes here: %v", why)
	}
	session := uuid.New()
	// Counted with builtins only: with the cap reached, nothing more forks.
	// In a subshell, which bash may give up on when a fork fails.
	res := bash(t, d, session, "(for i in {1..100}; do sleep 3 & done) 2>/dev/null; n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; echo $n")
	lines := strings.Fields(res.Output)
	n, err := strconv.Atoi(lines[len(lines)-1])
	if err != nil || n > 32+ownPids {
		t.Errorf("%q processes with a cap of 32 and %d of the sandbox's own", res.Output, ownPids)
	}
	res = bash(t, d, session, ":(){ :|:& };:; sleep 1; echo bombed")
	if ls := bash(t, d, session, "echo alive"); ls.IsError || !strings.Contains(ls.Output, "alive") {
		t.Errorf("after a fork bomb: %+v (the bomb: %+v)", ls, res)
	}
	// Another session's sandbox is untouched by the first's cap.
	if other := bash(t, d, uuid.New(), "for i in $(seq 20); do sleep 1 & done; echo started"); other.IsError {
		t.Errorf("another sandbox: %+v", other)
	}
}

// A starting manager removes the sandboxes' cgroups of managers that died,
// and leaves those of managers still running alone.
func TestStaleCgroupsRemoved(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	alive := exec.Command("sleep", "60")
	if err := alive.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = alive.Process.Kill(); _ = alive.Wait() })
	mk := func(pid int) string {
		parent := filepath.Join(root, fmt.Sprintf("corral-sandboxes-%d-ABCDEFGH", pid))
		if err := os.MkdirAll(filepath.Join(parent, "7"), 0o755); err != nil {
			t.Fatal(err)
		}
		return parent
	}
	gone, kept, own := mk(dead.Process.Pid), mk(alive.Process.Pid), mk(os.Getpid())
	removeStale(root)
	if _, err := os.Stat(gone); !os.IsNotExist(err) {
		t.Errorf("the cgroups of a manager that died are still there (%v)", err)
	}
	for _, dir := range []string{kept, own} {
		if _, err := os.Stat(filepath.Join(dir, "7")); err != nil {
			t.Errorf("a running manager's cgroup was removed: %v", err)
		}
	}
}

// What is left running in a dead manager's cgroups is killed.
func TestStaleSandboxProcessesKilled(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	left := exec.Command("sleep", "60")
	if err := left.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = left.Process.Kill() })
	exited := make(chan error, 1)
	go func() { exited <- left.Wait() }()
	// A stand-in for the cgroup: its process list is a plain file here.
	cg := filepath.Join(root, fmt.Sprintf("corral-sandboxes-%d-ABCDEFGH", dead.Process.Pid), "3")
	if err := os.MkdirAll(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(fmt.Sprintf("%d\n", left.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	removeStale(root)
	select {
	case err := <-exited:
		if !strings.Contains(fmt.Sprint(err), "killed") {
			t.Errorf("the process left in a dead manager's cgroup ended with %v, want killed", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("the process left in a dead manager's cgroup still runs")
	}
}
