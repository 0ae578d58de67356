package sandbox

import (
	"bufio"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// cgroups confines each sandbox in cgroups of its own: pids (its
// processes: RLIMIT_NPROC counts per host user across the machine, so it
// cannot keep a fork bomb in one sandbox from starving the host), memory
// (all its processes and its tmpfs together: RLIMIT_AS bounds each
// process alone) and cpu (a share of the CPUs, where RLIMIT_CPU bounds
// the CPU time of each process alone). The sandboxes' cgroups are made in
// one parent per Driver, the node's, which bounds them all together.
// Making cgroups needs the manager to be allowed to (root, or a delegated
// subtree); without that there are none, and a controller that is
// missing is left out.
//
// With cgroup v2 each bwrap is forked straight into its cgroup
// (CLONE_INTO_CGROUP). With cgroup v1 there is a hierarchy per
// controller: the starter's thread joins the sandbox's cgroup in each for
// the fork, so bwrap is born in them, and goes back after.
type cgroups struct {
	v2 bool
	// ctls are the controllers in use, in the order of [controllers].
	ctls []string
	// parent is where the sandboxes' cgroups are made, by controller (the
	// same directory for all under v2); home, under v1, is the cgroup of
	// the manager's, by controller, that the starter's thread goes back to.
	parent map[string]string
	home   map[string]string
	seq    atomic.Uint64
}

// controllers are the cgroup controllers a sandbox is confined by.
var controllers = []string{"pids", "memory", "cpu"}

// cgroupRoot is where cgroup file systems are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// cpuPeriod is the period of the CPU bandwidth limit, in microseconds.
const cpuPeriod = 100_000

// cgroupLimits are what one cgroup may use; zero fields are unbounded.
type cgroupLimits struct {
	pids   int
	memory int64   // bytes
	cpus   float64 // CPUs' worth of time
}

// cgroup is one sandbox's cgroups.
type cgroup struct {
	v2   bool
	dirs map[string]string // by controller

	// events is the memory cgroup's file that counts OOM kills, read
	// after every call: kept open from the first read until the cgroup
	// is removed, since opening it again each time cost 0.1 ms or more
	// after an idle, several times the read itself.
	mu      sync.Mutex
	events  *os.File
	removed bool
}

// newCgroups returns the sandboxes' cgroups, under a parent bounded by
// node, or nil when this process can make none. why says which
// controllers are missing and why, nil if none is.
func newCgroups(node cgroupLimits) (c *cgroups, why error) {
	// One parent per Driver: a process may run several.
	name := fmt.Sprintf("corral-sandboxes-%d-%s", os.Getpid(), rand.Text()[:8])
	var errs []error
	c = &cgroups{parent: map[string]string{}, home: map[string]string{}}
	if b, err := os.ReadFile(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
		c.v2 = true
		removeStale(cgroupRoot)
		parent := filepath.Join(cgroupRoot, name)
		if err := os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("make the sandboxes' cgroup: %w", err)
		}
		have := strings.Fields(string(b))
		for _, ctl := range controllers {
			if !slices.Contains(have, ctl) {
				errs = append(errs, fmt.Errorf("cgroup v2 without the %s controller", ctl))
				continue
			}
			err := os.WriteFile(filepath.Join(cgroupRoot, "cgroup.subtree_control"), []byte("+"+ctl), 0)
			if err == nil {
				err = os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+"+ctl), 0)
			}
			if err == nil {
				err = setLimit(true, ctl, parent, node)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("enable the %s controller: %w", ctl, err))
				continue
			}
			c.ctls = append(c.ctls, ctl)
			c.parent[ctl] = parent
		}
		if len(c.ctls) == 0 {
			os.Remove(parent)
			return nil, errors.Join(errs...)
		}
		return c, errors.Join(errs...)
	}
	for _, ctl := range controllers {
		base := filepath.Join(cgroupRoot, ctl)
		if _, err := os.Stat(filepath.Join(base, "cgroup.procs")); err != nil {
			errs = append(errs, fmt.Errorf("no %s cgroup controller mounted", ctl))
			continue
		}
		own, err := ownV1Cgroup(ctl)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		home := filepath.Join(base, own)
		removeStale(home)
		parent := filepath.Join(home, name)
		if err := os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			errs = append(errs, fmt.Errorf("make the sandboxes' %s cgroup: %w", ctl, err))
			continue
		}
		if err := setLimit(false, ctl, parent, node); err != nil {
			os.Remove(parent)
			errs = append(errs, err)
			continue
		}
		c.ctls = append(c.ctls, ctl)
		c.parent[ctl], c.home[ctl] = parent, home
	}
	if len(c.ctls) == 0 {
		return nil, errors.Join(errs...)
	}
	return c, errors.Join(errs...)
}

// setLimit writes the limit of controller ctl from l into the cgroup dir.
func setLimit(v2 bool, ctl, dir string, l cgroupLimits) error {
	write := func(file, value string) error {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0); err != nil {
			return fmt.Errorf("set %s: %w", file, err)
		}
		return nil
	}
	switch {
	case ctl == "pids" && l.pids > 0:
		return write("pids.max", strconv.Itoa(l.pids))
	case ctl == "memory" && l.memory > 0 && v2:
		// Not swapped out either, where there is swap: the limit is the
		// sandbox's whole footprint.
		_ = write("memory.swap.max", "0")
		return write("memory.max", strconv.FormatInt(l.memory, 10))
	case ctl == "memory" && l.memory > 0:
		if err := write("memory.limit_in_bytes", strconv.FormatInt(l.memory, 10)); err != nil {
			return err
		}
		// Memory and swap together, where the kernel counts swap.
		_ = write("memory.memsw.limit_in_bytes", strconv.FormatInt(l.memory, 10))
		return nil
	case ctl == "cpu" && l.cpus > 0:
		quota := strconv.FormatInt(int64(l.cpus*cpuPeriod), 10)
		if v2 {
			return write("cpu.max", quota+" "+strconv.Itoa(cpuPeriod))
		}
		if err := write("cpu.cfs_period_us", strconv.Itoa(cpuPeriod)); err != nil {
			return err
		}
		return write("cpu.cfs_quota_us", quota)
	}
	return nil
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
// controller, which may be mounted with others (cpu,cpuacct).
func ownV1Cgroup(controller string) (string, error) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) == 3 && slices.Contains(strings.Split(parts[1], ","), controller) {
			return parts[2], nil
		}
	}
	return "", fmt.Errorf("not in a %s cgroup", controller)
}

// create makes a sandbox's cgroups, bounded by l.
func (c *cgroups) create(l cgroupLimits) (*cgroup, error) {
	name := strconv.FormatUint(c.seq.Add(1), 10)
	g := &cgroup{v2: c.v2, dirs: map[string]string{}}
	for _, ctl := range c.ctls {
		dir := filepath.Join(c.parent[ctl], name)
		if !c.v2 || len(g.dirs) == 0 {
			if err := os.Mkdir(dir, 0o755); err != nil {
				g.remove()
				return nil, fmt.Errorf("make a %s cgroup: %w", ctl, err)
			}
		}
		g.dirs[ctl] = dir
		if err := setLimit(c.v2, ctl, dir, l); err != nil {
			g.remove()
			return nil, err
		}
	}
	return g, nil
}

// dir returns the directory of one of the sandbox's cgroups: under v2 its
// only one, under v1 the first in use.
func (g *cgroup) dir() string {
	for _, ctl := range controllers {
		if d, ok := g.dirs[ctl]; ok {
			return d
		}
	}
	return ""
}

// remove removes the sandbox's cgroups once their processes are gone.
func (g *cgroup) remove() {
	g.mu.Lock()
	if g.events != nil {
		g.events.Close()
		g.events = nil
	}
	g.removed = true
	g.mu.Unlock()
	seen := map[string]bool{}
	for _, d := range g.dirs {
		if !seen[d] {
			seen[d] = true
			removeCgroup(d)
		}
	}
}

// oomKills returns how many of the sandbox's processes the kernel has
// killed for want of memory; 0 without a memory cgroup.
func (g *cgroup) oomKills() uint64 {
	dir, ok := g.dirs["memory"]
	if !ok {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.removed {
		return 0
	}
	if g.events == nil {
		file := "memory.oom_control" // v1; since Linux 4.13 it counts kills
		if g.v2 {
			file = "memory.events.local"
		}
		f, err := os.Open(filepath.Join(dir, file))
		if errors.Is(err, os.ErrNotExist) && g.v2 {
			f, err = os.Open(filepath.Join(dir, "memory.events"))
		}
		if err != nil {
			return 0
		}
		g.events = f
	}
	var buf [1024]byte
	read, err := g.events.ReadAt(buf[:], 0)
	if err != nil && err != io.EOF {
		return 0
	}
	if n, ok := counter(buf[:read], "oom_kill"); ok {
		return n
	}
	// Older v1 kernels: how often the limit was hit, a kill or not.
	data, err := os.ReadFile(filepath.Join(dir, "memory.failcnt"))
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	return n
}

// counter returns the value of key in a cgroup file of "key value" lines.
func counter(data []byte, key string) (uint64, bool) {
	for line := range strings.Lines(string(data)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok && k == key {
			n, err := strconv.ParseUint(v, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// enter moves the calling thread into g (v1), returning the func that
// moves it back.
func (c *cgroups) enter(g *cgroup) (leave func(), err error) {
	tid := []byte(strconv.Itoa(unix.Gettid()))
	var joined []string
	leave = func() {
		for _, ctl := range joined {
			_ = os.WriteFile(filepath.Join(c.home[ctl], "tasks"), tid, 0)
		}
	}
	for _, ctl := range c.ctls {
		if err := os.WriteFile(filepath.Join(g.dirs[ctl], "tasks"), tid, 0); err != nil {
			leave()
			return nil, fmt.Errorf("join the sandbox's %s cgroup: %w", ctl, err)
		}
		joined = append(joined, ctl)
	}
	return leave, nil
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

// has reports whether controller ctl is in use.
func (c *cgroups) has(ctl string) bool {
	return c != nil && slices.Contains(c.ctls, ctl)
}

// close removes the parents of the sandboxes' cgroups, once they are gone.
func (c *cgroups) close() {
	seen := map[string]bool{}
	for _, d := range c.parent {
		if !seen[d] {
			seen[d] = true
			removeCgroup(d)
		}
	}
}
