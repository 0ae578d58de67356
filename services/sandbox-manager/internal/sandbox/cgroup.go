package sandbox

import (
	"bufio"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// pidsCgroups caps the processes of each sandbox with a pids cgroup of its
// own: RLIMIT_NPROC counts per host user across the machine and is never
// enforced for host root, so it cannot keep a fork bomb in one sandbox
// from starving the host. It needs the manager to be allowed to make
// cgroups (root, or a delegated subtree); without that there is none.
//
// With cgroup v2 each bwrap is forked straight into its cgroup
// (CLONE_INTO_CGROUP). With cgroup v1 the starter's thread joins the
// cgroup for the fork, so bwrap is born in it, and goes back after.
type pidsCgroups struct {
	v2     bool
	parent string // where the sandboxes' cgroups are made
	home   string // v1: the cgroup the starter's thread goes back to
	seq    atomic.Uint64
}

// cgroupRoot is where cgroup file systems are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// newPidsCgroups returns the sandboxes' cgroups, or nil with the reason
// when this process cannot make them.
func newPidsCgroups() (*pidsCgroups, error) {
	// One parent per Driver: a process may run several.
	name := fmt.Sprintf("corral-sandboxes-%d-%s", os.Getpid(), rand.Text()[:8])
	if b, err := os.ReadFile(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
		if !slices.Contains(strings.Fields(string(b)), "pids") {
			return nil, errors.New("cgroup v2 without the pids controller")
		}
		removeStale(cgroupRoot)
		parent := filepath.Join(cgroupRoot, name)
		if err := os.WriteFile(filepath.Join(cgroupRoot, "cgroup.subtree_control"), []byte("+pids"), 0); err != nil {
			return nil, fmt.Errorf("enable the pids controller: %w", err)
		}
		if err := os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+pids"), 0); err != nil {
			os.Remove(parent)
			return nil, fmt.Errorf("enable the pids controller: %w", err)
		}
		return &pidsCgroups{v2: true, parent: parent}, nil
	}
	v1 := filepath.Join(cgroupRoot, "pids")
	if _, err := os.Stat(filepath.Join(v1, "cgroup.procs")); err != nil {
		return nil, errors.New("no pids cgroup controller mounted")
	}
	own, err := ownV1Cgroup("pids")
	if err != nil {
		return nil, err
	}
	removeStale(v1)
	parent := filepath.Join(v1, name)
	if err := os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, err
	}
	return &pidsCgroups{parent: parent, home: filepath.Join(v1, own)}, nil
}

// removeStale removes the sandboxes' cgroups left under dir by managers
// that died. Their sandboxes most often died with them, but not always:
// bwrap run as root drops its capabilities, which clears the parent-death
// signal its manager gave it, so one killed mid-start by its manager's
// death can wait forever for a sandbox that never came up. What is left
// in a dead manager's cgroups is killed before they are removed.
func removeStale(dir string) {
	parents, _ := filepath.Glob(filepath.Join(dir, "corral-sandboxes-*"))
	for _, parent := range parents {
		fields := strings.Split(filepath.Base(parent), "-")
		pid, err := strconv.Atoi(fields[2])
		if err != nil || pid == os.Getpid() || unix.Kill(pid, 0) != unix.ESRCH {
			continue
		}
		children, _ := filepath.Glob(filepath.Join(parent, "*"))
		for _, c := range children {
			if fi, err := os.Stat(c); err == nil && fi.IsDir() {
				killProcs(c)
				removeCgroup(c)
			}
		}
		os.Remove(parent)
	}
}

// killProcs kills the processes of the cgroup dir.
func killProcs(dir string) {
	pids, _ := cgroupProcs(dir)
	for _, pid := range pids {
		if pid > 0 {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
}

// removeCgroup removes the cgroup dir once its processes are gone, which
// the kernel finishes shortly after they die.
func removeCgroup(dir string) {
	for range 50 {
		if err := os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ownV1Cgroup returns this process's cgroup in the v1 hierarchy of
// controller.
func ownV1Cgroup(controller string) (string, error) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) == 3 && parts[1] == controller {
			return parts[2], nil
		}
	}
	return "", fmt.Errorf("not in a %s cgroup", controller)
}

// create makes a cgroup allowing max processes and returns its directory.
func (p *pidsCgroups) create(max int) (string, error) {
	dir := filepath.Join(p.parent, strconv.FormatUint(p.seq.Add(1), 10))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", fmt.Errorf("make a pids cgroup: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.Itoa(max)), 0); err != nil {
		os.Remove(dir)
		return "", fmt.Errorf("set pids.max: %w", err)
	}
	return dir, nil
}

// enter moves the calling thread into dir (v1), returning the func that
// moves it back.
func (p *pidsCgroups) enter(dir string) (leave func(), err error) {
	tid := []byte(strconv.Itoa(unix.Gettid()))
	if err := os.WriteFile(filepath.Join(dir, "tasks"), tid, 0); err != nil {
		return nil, fmt.Errorf("join the sandbox's pids cgroup: %w", err)
	}
	return func() { _ = os.WriteFile(filepath.Join(p.home, "tasks"), tid, 0) }, nil
}

// cgroupProcs lists the processes of the cgroup dir.
func cgroupProcs(dir string) ([]int, error) {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// close removes the parent of the sandboxes' cgroups, once they are gone.
func (p *pidsCgroups) close() {
	removeCgroup(p.parent)
}
