package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The chaos test's processes: each component runs as an OS process under a
// supervisor that restarts it whenever it dies, as a container runtime would.

// Component names.
const (
	compNATS    = "nats-server"
	compHarness = "harness"
	compSandbox = "sandbox-manager"
)

// buildChaosBinaries builds the three binaries into dir, without -race, in
// one go build so that they compile in parallel. The test runs in
// services/corral, whose module has nats-server in its build list.
func buildChaosBinaries(t *testing.T, goBin, dir string) map[string]string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(goBin, "build", "-o", dir+string(filepath.Separator),
		"github.com/nats-io/nats-server/v2",
		"corral.dev/services/harness/cmd/harness",
		"corral.dev/services/sandbox-manager/cmd/sandbox-manager")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, b)
	}
	bins := make(map[string]string)
	for _, name := range []string{compNATS, compHarness, compSandbox} {
		bins[name] = filepath.Join(dir, name)
		if _, err := os.Stat(bins[name]); err != nil {
			t.Fatalf("go build made no %s: %v", name, err)
		}
	}
	return bins
}

// chaosProc is one supervised component.
type chaosProc struct {
	name    string
	bin     string
	args    []string
	env     []string
	logPath string
	log     *os.File

	stopCh chan struct{}
	done   chan struct{}

	mu       sync.Mutex
	cmd      *exec.Cmd
	since    time.Time
	started  bool // the supervisor runs, or ran
	stopping bool
	killed   bool // the running process was killed by the test
	starts   int
	exits    []string // exits the test did not cause
}

func newChaosProc(t *testing.T, dir, name, bin string, args, env []string) *chaosProc {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	return &chaosProc{name: name, bin: bin, args: args, env: env, logPath: logPath, log: f,
		stopCh: make(chan struct{}), done: make(chan struct{})}
}

// start runs the supervisor; stop ends it and the process.
func (p *chaosProc) start() {
	p.mu.Lock()
	p.started = true
	p.mu.Unlock()
	go p.supervise()
}

func (p *chaosProc) supervise() {
	defer close(p.done)
	// Pdeathsig fires when the thread that started the child exits: keep
	// this goroutine on one thread for as long as it has children, so the
	// children die with the test process and not before.
	runtime.LockOSThread()
	for {
		p.mu.Lock()
		if p.stopping {
			p.mu.Unlock()
			return
		}
		cmd := exec.Command(p.bin, p.args...)
		cmd.Env = p.env
		cmd.Stdout, cmd.Stderr = p.log, p.log
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		fmt.Fprintf(p.log, "=== chaos: start #%d at %s\n", p.starts+1, time.Now().Format("15:04:05.000"))
		if err := cmd.Start(); err != nil {
			p.exits = append(p.exits, fmt.Sprintf("%s: start: %v", time.Now().Format("15:04:05.000"), err))
			p.mu.Unlock()
			if p.pause(500 * time.Millisecond) {
				return
			}
			continue
		}
		p.cmd, p.since = cmd, time.Now()
		p.starts++
		p.mu.Unlock()

		err := cmd.Wait()

		p.mu.Lock()
		p.cmd = nil
		killed, stopping := p.killed, p.stopping
		p.killed = false
		if !killed && !stopping {
			msg := fmt.Sprintf("%s: exited on its own: %v", time.Now().Format("15:04:05.000"), err)
			p.exits = append(p.exits, msg)
			fmt.Fprintf(p.log, "=== chaos: %s\n", msg)
		}
		p.mu.Unlock()
		if stopping {
			return
		}
		delay := 500 * time.Millisecond
		if killed {
			delay = 100*time.Millisecond + rand.N(1400*time.Millisecond)
		}
		if p.pause(delay) {
			return
		}
	}
}

// pause waits d, or less when the test stops; it reports a stop.
func (p *chaosProc) pause(d time.Duration) bool {
	select {
	case <-p.stopCh:
		return true
	case <-time.After(d):
		return false
	}
}

// kill sends SIGKILL to the running process. It reports false when the
// process is down or has not been up for minUp.
func (p *chaosProc) kill(minUp time.Duration) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.stopping || p.killed || time.Since(p.since) < minUp {
		return false
	}
	p.killed = true
	desc := descendants(p.cmd.Process.Pid)
	fmt.Fprintf(p.log, "=== chaos: SIGKILL at %s (%d descendants)\n", time.Now().Format("15:04:05.000"), len(desc))
	_ = p.cmd.Process.Kill()
	return true
}

// procID names a process across pid reuse: its pid and start time.
type procID struct {
	pid   int
	start string
	ppid  int
	cmd   string
}

// descendants returns the processes below pid, from /proc.
func descendants(pid int) []procID {
	var out []procID
	todo := []int{pid}
	for len(todo) > 0 {
		p := todo[0]
		todo = todo[1:]
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", p))
		for _, f := range tasks {
			b, _ := os.ReadFile(f)
			for _, field := range strings.Fields(string(b)) {
				c, err := strconv.Atoi(field)
				if err != nil {
					continue
				}
				todo = append(todo, c)
				if id, ok := procOf(c); ok {
					out = append(out, id)
				}
			}
		}
	}
	return out
}

// procOf returns the identity of a live (not zombie) process.
func procOf(pid int) (procID, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procID{}, false
	}
	// pid (comm) state ppid ... starttime is field 22; comm may hold spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procID{}, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return procID{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return procID{pid: pid, start: f[19], ppid: ppid, cmd: strings.ReplaceAll(strings.TrimRight(string(cmd), "\x00"), "\x00", " ")}, true
}

// strays returns the live processes whose command line names dir but that
// are not below this test process: processes of the components (sandboxes,
// say) that outlived them. A sandbox must die with its sandbox-manager.
func strays(dir string) []procID {
	self := os.Getpid()
	entries, _ := os.ReadDir("/proc")
	var out []procID
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		id, ok := procOf(pid)
		if !ok || !strings.Contains(id.cmd, dir+"/") {
			continue
		}
		below := false
		for p, n := id.ppid, 0; p > 1 && n < 64; n++ {
			if p == self {
				below = true
				break
			}
			up, ok := procOf(p)
			if !ok {
				break
			}
			p = up.ppid
		}
		if !below && !isAncestor(pid, self) {
			out = append(out, id)
		}
	}
	return out
}

// isAncestor reports whether pid is an ancestor of child (go test, say,
// whose command line may name dir too).
func isAncestor(pid, child int) bool {
	for p, n := child, 0; p > 1 && n < 64; n++ {
		id, ok := procOf(p)
		if !ok {
			return false
		}
		if id.ppid == pid {
			return true
		}
		p = id.ppid
	}
	return false
}

// strayKill kills the strays of dir that are still strays a second after
// they are first seen (a process whose parent was killed a moment ago may
// not have had time to die with it), so that nothing outlives the test,
// and returns them.
func strayKill(dir string) []procID {
	first := strays(dir)
	if len(first) == 0 {
		return nil
	}
	time.Sleep(time.Second)
	still := map[procID]bool{}
	for _, id := range strays(dir) {
		still[id] = true
	}
	var out []procID
	for _, id := range first {
		if still[id] {
			_ = syscall.Kill(id.pid, syscall.SIGKILL)
			out = append(out, id)
		}
	}
	return out
}

// runsCall reports whether one of the running process's descendants is the
// sleep of a chaos Bash call: for the sandbox-manager, that a call is
// running in a sandbox (a sandbox's executor lives on between calls).
func (p *chaosProc) runsCall() bool {
	p.mu.Lock()
	if p.cmd == nil {
		p.mu.Unlock()
		return false
	}
	pid := p.cmd.Process.Pid
	p.mu.Unlock()
	for _, d := range descendants(pid) {
		if strings.HasPrefix(d.cmd, "sleep ") {
			return true
		}
	}
	return false
}

// dumpStacks makes the running Go process print its goroutines to its log
// and exit (SIGQUIT); the supervisor restarts it.
func (p *chaosProc) dumpStacks() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.stopping {
		return
	}
	p.killed = true
	fmt.Fprintf(p.log, "=== chaos: SIGQUIT at %s: goroutine dump follows\n", time.Now().Format("15:04:05.000"))
	_ = p.cmd.Process.Signal(syscall.SIGQUIT)
}

// up reports whether the process runs.
func (p *chaosProc) up() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !p.killed
}

// stop ends the process for good, gracefully (SIGTERM) unless it takes
// more than a few seconds, and waits for the supervisor.
func (p *chaosProc) stop() {
	p.mu.Lock()
	if !p.stopping {
		p.stopping = true
		close(p.stopCh)
		if p.cmd != nil {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	started := p.started
	p.mu.Unlock()
	if !started { // the test failed before it started the process
		p.log.Close()
		return
	}
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		p.mu.Lock()
		if p.cmd != nil {
			_ = p.cmd.Process.Kill()
		}
		p.mu.Unlock()
		<-p.done
	}
	p.log.Close()
}

func (p *chaosProc) unexpectedExits() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.exits...)
}

// tail returns the last n lines of the process's log.
func (p *chaosProc) tail(n int) string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// lines returns the lines of the log that re matches.
func (p *chaosProc) lines(re *regexp.Regexp) []string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if re.MatchString(l) {
			out = append(out, l)
		}
	}
	return out
}

// crash finds a Go panic or fatal error in a log.
var crash = regexp.MustCompile(`^(panic|fatal error): `)

// crashes returns the lines of the log that tell of a Go panic or fatal
// error: a crash the test did not cause.
func (p *chaosProc) crashes() []string { return p.lines(crash) }

// violation finds a permission violation in a log: a service's report of
// one (bus.Connect logs it), or the server's.
var violation = regexp.MustCompile(`Permissions Violation|Publish Violation|Subscription Violation`)

// signInRefused finds, in the server's log, a sign-in it refused, and the
// user it named.
var signInRefused = regexp.MustCompile(`authentication error(?: - User "([^"]*)")?`)

// momentWait bounds how long a moment func waits for its moment.
const momentWait = 3 * time.Second

// whenTrue returns a moment func that waits until busy reports true.
func whenTrue(busy func() bool) func(context.Context) {
	return func(ctx context.Context) {
		for deadline := time.Now().Add(momentWait); !busy() && time.Now().Before(deadline); {
			select {
			case <-ctx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
}

// mostly returns a moment func that waits for f's moment two times in
// three, and otherwise kills at once, at whatever the process is doing.
func mostly(f func(context.Context)) func(context.Context) {
	return func(ctx context.Context) {
		if rand.N(3) > 0 {
			f(ctx)
		}
	}
}

// chaosKill is one kill the killer made.
type chaosKill struct {
	comp string
	at   time.Time
	// strays are the processes found orphaned orphanGrace after the kill
	// (and not before), whatever their parent was: sandboxes must die with
	// their sandbox-manager.
	strays []procID
}

// orphanGrace is how long a killed process's descendants may take to die.
const orphanGrace = 2 * time.Second

// killSchedule returns n components to kill in random order, each at least
// twice when n allows.
func killSchedule(n int, rng *rand.Rand) []string {
	comps := []string{compHarness, compSandbox, compNATS}
	var s []string
	for len(s) < n && len(s) < 2*len(comps) {
		s = append(s, comps[len(s)%len(comps)])
	}
	for len(s) < n {
		s = append(s, comps[rng.IntN(len(comps))])
	}
	rng.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
	return s
}

// killer kills the scheduled components one after the other, gap apart,
// each once it has been up a little while, and returns the kills made.
// Before each kill it calls the component's moment func, if any, which
// waits (briefly) for a moment when the component is in the middle of some
// work rather than idle.
// Each kill is followed, orphanGrace later, by a look for processes of
// dir that outlived their parents.
func killer(ctx context.Context, procs map[string]*chaosProc, moment map[string]func(context.Context), schedule []string, gap func() time.Duration, dir string) []chaosKill {
	// kills only grows to len(schedule), so pointers into it stay valid.
	kills := make([]chaosKill, 0, len(schedule))
	var wg sync.WaitGroup
	defer wg.Wait()
	var mu sync.Mutex
	seen := map[procID]bool{}
	for _, comp := range schedule {
		select {
		case <-ctx.Done():
			return kills
		case <-time.After(gap()):
		}
		if f := moment[comp]; f != nil {
			f(ctx)
		}
		for {
			if procs[comp].kill(300 * time.Millisecond) {
				kills = append(kills, chaosKill{comp: comp, at: time.Now()})
				k := &kills[len(kills)-1]
				wg.Add(1)
				time.AfterFunc(orphanGrace, func() {
					defer wg.Done()
					mu.Lock()
					defer mu.Unlock()
					for _, s := range strayKill(dir) {
						if !seen[s] {
							seen[s] = true
							k.strays = append(k.strays, s)
						}
					}
				})
				break
			}
			select {
			case <-ctx.Done():
				return kills
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return kills
}
