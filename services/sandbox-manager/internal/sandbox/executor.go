package sandbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// ExecutorArg is the argument that makes our binary run as a sandbox's
// executor; see [RunExecutorIfRequested].
const ExecutorArg = "corral-sandbox-executor"

// executorPath is where a sandbox sees our binary, bound read-only.
const executorPath = "/run/corral/executor"

// maxRequest bounds one request line: the command and a little JSON.
const maxRequest = 16 << 20

// fatalSignals are the signals on which the Go runtime exits (or, sent with
// kill, panics) unless the program asks for them.
var fatalSignals = []os.Signal{
	unix.SIGHUP, unix.SIGINT, unix.SIGQUIT, unix.SIGILL, unix.SIGTRAP, unix.SIGABRT,
	unix.SIGBUS, unix.SIGFPE, unix.SIGSEGV, unix.SIGTERM, unix.SIGSTKFLT, unix.SIGSYS,
}

// RunExecutorIfRequested runs the executor and exits the process if this
// process was started as one (its only argument is [ExecutorArg]), and
// returns at once otherwise. Every binary that creates a [Driver] must call
// it first thing in main, and every test binary that does so first thing in
// TestMain: the Driver starts a sandbox by running its own executable inside
// it as the executor, which reads commands from its stdin, runs them, and
// answers on its stdout.
//
// It refuses to run unless it is PID 1 of its PID namespace, so that
// starting the binary by hand with that argument cannot kill the caller's
// processes.
func RunExecutorIfRequested() {
	if len(os.Args) != 2 || os.Args[1] != ExecutorArg {
		return
	}
	if os.Getpid() != 1 {
		fmt.Fprintf(os.Stderr, "%s: %s runs only as the first process of a sandbox\n", os.Args[0], ExecutorArg)
		os.Exit(2)
	}
	code := 0
	// The executor's own main: nothing above it could cancel it.
	ctx := context.Background()
	if err := serve(ctx, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "sandbox executor: %v\n", err)
		code = 1
	}
	// Nothing is buffered, so exit at once: os.Exit would run the race
	// detector's exit hooks in race-enabled test binaries, which sleep a
	// second and make every sandbox stop take that long.
	unix.Exit(code)
}

// serve says hello on out, then runs the requests read from in one at a
// time until in ends. In a sandbox with network it relays the proxy port
// to the egress socket meanwhile (see relay.go).
func serve(ctx context.Context, in io.Reader, out io.Writer) error {
	// As init of its PID namespace the executor receives, from inside the
	// sandbox, only the signals it has a handler for, and the Go runtime
	// has one for nearly all. Most it then drops, but it exits on these
	// unless they are asked for: ask for them and drop them, so that a
	// command cannot kill the executor with kill -TERM 1 or the like. Asked
	// for, not ignored: an ignored signal would stay ignored in every
	// command. (Not all signals: asking for each costs a round trip to the
	// runtime's signal thread, about 20µs here.) The goroutine ends with
	// the process.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, fatalSignals...)
	go func() {
		for range sigs {
		}
	}()
	// Descriptors the manager's own parent left open without
	// close-on-exec come this far through bwrap: no command gets them.
	if err := closeOnExec(); err != nil {
		return err
	}
	// Commands run as the same user. Not being dumpable keeps them from
	// ptracing the executor or opening its pipes through /proc/1/fd.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl: %w", err)
	}
	// Listening before any command runs, so that none can take the port
	// first.
	rl, err := relayIfNetwork(ctx)
	if err != nil {
		return err
	}
	defer rl.close()
	x, err := newExecutor()
	if err != nil {
		return err
	}
	warmThreads(executorThreads)
	x.prepare()
	if err := writeMsg(out, hello{Version: protocolVersion}); err != nil {
		return fmt.Errorf("write hello: %w", err)
	}
	br := bufio.NewReaderSize(in, 64<<10)
	for {
		var req request
		err := readMsg(br, maxRequest, &req)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read request: %w", err)
		}
		resp := x.run(req, out)
		rl.drop() // their clients are dead: see [relay.drop]
		if err := writeMsg(out, resp); err != nil {
			return fmt.Errorf("write response: %w", err)
		}
		// The next call's shell starts while the sandbox waits for it.
		x.prepare()
	}
}

// closeOnExec marks every descriptor above stderr close-on-exec.
func closeOnExec() error {
	err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC)
	if err != unix.ENOSYS && err != unix.EINVAL {
		if err != nil {
			return fmt.Errorf("close_range: %w", err)
		}
		return nil
	}
	// Before Linux 5.11: one at a time.
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("list descriptors: %w", err)
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
	return nil
}

// executorThreads is how many threads the executor starts before its first
// call: enough for a call's goroutines blocked in syscalls (reading the
// output and sending it live, waiting for children, the timeout) beside
// the runtime's own.
const executorThreads = 8

// ownPids is what a sandbox's pids cgroup holds besides its commands'
// processes, which [Config.Processes] counts: bwrap's, and the executor's
// threads, the warm ones and the Go runtime's own (17 in all when last
// counted, idle), with room to spare.
const ownPids = 24

// warmThreads has the Go runtime start n threads now and keep them idle.
// The sandbox's pids cgroup counts threads too: a command that takes every
// process slot (a fork bomb) must not leave the executor unable to start a
// thread, which the runtime treats as fatal. A goroutine locked to its
// thread and parked makes the runtime start another for the rest; once
// unlocked, the threads stay for later use.
func warmThreads(n int) {
	var started, release sync.WaitGroup
	started.Add(n)
	release.Add(1)
	var done sync.WaitGroup
	for range n {
		done.Go(func() {
			runtime.LockOSThread()
			started.Done()
			release.Wait()
			runtime.UnlockOSThread()
		})
	}
	started.Wait()
	release.Done()
	done.Wait()
}
