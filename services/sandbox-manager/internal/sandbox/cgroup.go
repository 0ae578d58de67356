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

// pidsCgroups gives each sandbox cgroups of its own. A pids cgroup caps
// its processes: RLIMIT_NPROC counts per host user across the machine and
// is never enforced for host root, so it cannot keep a fork bomb in one
// sandbox from starving the host. A freezer, where there is one, suspends
// an idle sandbox: its processes stay, stopped, and thaw in microseconds.
// It needs the manager to be allowed to make cgroups (root, or a delegated
// subtree); without that there is none.
//
// With cgroup v2 one cgroup does both, and each bwrap is forked straight
// into it (CLONE_INTO_CGROUP). With cgroup v1 the pids and freezer
// hierarchies are separate; the starter's thread joins the sandbox's
// cgroup in each for the fork, so bwrap is born in them, and goes back
// after.
type pidsCgroups struct {
	v2      bool
	pids    hierarchy  // the unified one on v2
	freezer *hierarchy // v1 only; nil when v1 has no freezer
	seq     atomic.Uint64
}

// hierarchy is where a cgroup hierarchy's sandbox cgroups are made.
type hierarchy struct {
	parent string // the parent of the sandboxes' cgroups
	home   string // v1: the cgroup the starter's thread goes back to
}

// boxCgroup is one sandbox's cgroups: pids, and on v1 freezer if any.
type boxCgroup struct {
	pids, freezer string
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
		return &pidsCgroups{v2: true, pids: hierarchy{parent: parent}}, nil
	}
	pids, err := newV1Hierarchy("pids", name)
	if err != nil {
		return nil, err
	}
	p := &pidsCgroups{pids: *pids}
	if freezer, err := newV1Hierarchy("freezer", name); err == nil {
		p.freezer = freezer
	}
	return p, nil
}

// newV1Hierarchy makes the parent of the sandboxes' cgroups, name, in the
// v1 hierarchy of controller.
func newV1Hierarchy(controller, name string) (*hierarchy, error) {
	root := filepath.Join(cgroupRoot, controller)
	if _, err := os.Stat(filepath.Join(root, "cgroup.procs")); err != nil {
		return nil, fmt.Errorf("no %s cgroup controller mounted", controller)
	}
	own, err := ownV1Cgroup(controller)
	if err != nil {
		return nil, err
	}
	removeStale(root)
	parent := filepath.Join(root, name)
	if err := os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, err
	}
	return &hierarchy{parent: parent, home: filepath.Join(root, own)}, nil
}

// canFreeze reports whether sandboxes can be suspended in a freezer.
func (p *pidsCgroups) canFreeze() bool {
	return p.v2 || p.freezer != nil
}

// removeStale removes the sandboxes' cgroups left under dir by managers
// that died (their processes die with them): a manager killed outright
// leaves them behind.
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
				// A sandbox suspended when its manager died was sent
				// SIGKILL, which a frozen process takes only once thawed.
				_ = os.WriteFile(filepath.Join(c, "freezer.state"), []byte("THAWED"), 0)
				_ = os.WriteFile(filepath.Join(c, "cgroup.freeze"), []byte("0"), 0)
				removeDir(c)
			}
		}
		os.Remove(parent)
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

// create makes a sandbox's cgroups, allowing max processes.
func (p *pidsCgroups) create(max int) (boxCgroup, error) {
	name := strconv.FormatUint(p.seq.Add(1), 10)
	cg := boxCgroup{pids: filepath.Join(p.pids.parent, name)}
	if err := os.Mkdir(cg.pids, 0o755); err != nil {
		return boxCgroup{}, fmt.Errorf("make a pids cgroup: %w", err)
	}
	if err := os.WriteFile(filepath.Join(cg.pids, "pids.max"), []byte(strconv.Itoa(max)), 0); err != nil {
		os.Remove(cg.pids)
		return boxCgroup{}, fmt.Errorf("set pids.max: %w", err)
	}
	if p.freezer != nil {
		cg.freezer = filepath.Join(p.freezer.parent, name)
		if err := os.Mkdir(cg.freezer, 0o755); err != nil {
			os.Remove(cg.pids)
			return boxCgroup{}, fmt.Errorf("make a freezer cgroup: %w", err)
		}
	}
	return cg, nil
}

// enter moves the calling thread into the v1 cgroups of cg, returning the
// func that moves it back.
func (p *pidsCgroups) enter(cg boxCgroup) (leave func(), err error) {
	tid := []byte(strconv.Itoa(unix.Gettid()))
	if err := os.WriteFile(filepath.Join(cg.pids, "tasks"), tid, 0); err != nil {
		return nil, fmt.Errorf("join the sandbox's pids cgroup: %w", err)
	}
	leave = func() { _ = os.WriteFile(filepath.Join(p.pids.home, "tasks"), tid, 0) }
	if cg.freezer != "" {
		if err := os.WriteFile(filepath.Join(cg.freezer, "tasks"), tid, 0); err != nil {
			leave()
			return nil, fmt.Errorf("join the sandbox's freezer cgroup: %w", err)
		}
		leavePids := leave
		leave = func() {
			leavePids()
			_ = os.WriteFile(filepath.Join(p.freezer.home, "tasks"), tid, 0)
		}
	}
	return leave, nil
}

// freeze stops every process of cg's sandbox (frozen true) or lets them
// run again, and waits until the kernel has done it.
func (p *pidsCgroups) freeze(cg boxCgroup, frozen bool) error {
	file, want, done := filepath.Join(cg.freezer, "freezer.state"), "THAWED", "THAWED"
	if frozen {
		want, done = "FROZEN", "FROZEN"
	}
	if p.v2 {
		file, want, done = filepath.Join(cg.pids, "cgroup.freeze"), "0", "frozen 0"
		if frozen {
			want, done = "1", "frozen 1"
		}
	} else if cg.freezer == "" {
		return errors.New("no freezer cgroup")
	}
	if err := os.WriteFile(file, []byte(want), 0); err != nil {
		return fmt.Errorf("freeze: %w", err)
	}
	state := file
	if p.v2 {
		state = filepath.Join(cg.pids, "cgroup.events")
	}
	// Freezing waits for each task to reach a point where it can stop;
	// an idle sandbox's take microseconds.
	for range 1000 {
		b, err := os.ReadFile(state)
		if err != nil {
			return fmt.Errorf("freeze: %w", err)
		}
		if strings.Contains(string(b), done) {
			return nil
		}
		time.Sleep(100 * time.Microsecond)
	}
	return fmt.Errorf("freeze: %s did not become %q", state, done)
}

// remove removes a sandbox's cgroups once its processes are gone, which
// the kernel finishes shortly after the sandbox's PID 1 dies.
func (p *pidsCgroups) remove(cg boxCgroup) {
	removeDir(cg.pids)
	if cg.freezer != "" {
		removeDir(cg.freezer)
	}
}

func removeDir(dir string) {
	for range 50 {
		if err := os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// close removes the parents of the sandboxes' cgroups, once they are gone.
func (p *pidsCgroups) close() {
	removeDir(p.pids.parent)
	if p.freezer != nil {
		removeDir(p.freezer.parent)
	}
}
