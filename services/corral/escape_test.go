package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"

	"corral.dev/pkg/egressapi"
	"corral.dev/pkg/event"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
)

// escapeAttempt is one thing a hostile agent tries, as a tool call, and how
// to tell that it failed harmlessly.
type escapeAttempt struct {
	name string
	call modeltest.Call
	// held reports whether the attempt failed harmlessly, given its result;
	// it says what it saw.
	held func(r *event.ToolCompleted) (bool, string)
}

func lacks(canaries ...string) func(r *event.ToolCompleted) (bool, string) {
	return func(r *event.ToolCompleted) (bool, string) {
		for _, c := range canaries {
			if strings.Contains(r.Output, c) {
				return false, "the output holds the secret"
			}
		}
		return true, "nothing secret came back"
	}
}

// TestEscapeSuite runs, against the real bwrap sandbox and through the
// whole platform, each attempt to break out as a Bash (or file tool) call
// of a scripted model, and checks each fails harmlessly. It logs a table of
// every attempt and its outcome.
func TestEscapeSuite(t *testing.T) {
	canary := "secret-" + uuid.NewString()
	name := "corral-escape-" + uuid.NewString()[:8]
	// Secrets on the host, where a sandbox must not reach.
	hostFiles := []string{"/root/." + name, "/home/" + name}
	for _, f := range hostFiles {
		if err := os.WriteFile(f, []byte(canary), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(f) })
	}
	// Listeners on the host that no sandbox may reach.
	var reached, udpReached atomic.Int32
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	go func() {
		for {
			c, err := tcp.Accept()
			if err != nil {
				return
			}
			reached.Add(1)
			c.Close()
		}
	}()
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	go func() {
		buf := make([]byte, 64)
		for {
			if _, _, err := udp.ReadFrom(buf); err != nil {
				return
			}
			udpReached.Add(1)
		}
	}()
	abstract := "corral-escape-" + uuid.NewString()[:8]
	unix, err := net.Listen("unix", "@"+abstract)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close()
	go func() {
		for {
			c, err := unix.Accept()
			if err != nil {
				return
			}
			reached.Add(1)
			c.Close()
		}
	}()
	_, tcpPort, _ := net.SplitHostPort(tcp.Addr().String())
	_, udpPort, _ := net.SplitHostPort(udp.LocalAddr().String())

	data := t.TempDir()
	if err := os.WriteFile(filepath.Join(data, "host-secret.txt"), []byte(canary), 0o644); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(data, "workspaces", "acme", uuid.NewString())
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "notes.txt"), []byte(canary), 0o644); err != nil {
		t.Fatal(err)
	}

	bashCall := func(cmd string) modeltest.Call { return bash(cmd) }
	attempts := []escapeAttempt{
		{"read /root and /home on the host", bashCall("cat /root/." + name + " /home/" + name + " 2>&1; ls -a /root /home 2>&1"), lacks(canary)},
		{"read the data directory", bashCall("cat " + data + "/host-secret.txt 2>&1; ls -R " + data + " 2>&1 | head"), lacks(canary)},
		{"read another session's workspace", bashCall("cat " + other + "/notes.txt 2>&1; ls -a /workspace/.. 2>&1; cat /workspace/../*/notes.txt 2>&1"), lacks(canary)},
		{"read the harness's environment", bashCall("env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'"), lacks("sk-escape-canary")},
		{"reach a TCP port on the host", bashCall("(echo hi > /dev/tcp/127.0.0.1/" + tcpPort + ") 2>&1; echo rc=$?"), func(r *event.ToolCompleted) (bool, string) {
			return !strings.Contains(r.Output, "rc=0"), "no connection"
		}},
		// The sandbox has a loopback of its own: the send succeeds there,
		// and nothing arrives on the host.
		{"send UDP to the host", bashCall("(echo hi > /dev/udp/127.0.0.1/" + udpPort + ") 2>&1; echo rc=$?"), func(r *event.ToolCompleted) (bool, string) {
			return udpReached.Load() == 0, "nothing arrived on the host"
		}},
		{"reach an abstract unix socket", bashCall(`python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.connect("\0` + abstract + `"); print("CONNECTED")' 2>&1`), func(r *event.ToolCompleted) (bool, string) {
			return strings.Contains(r.Output, "ConnectionRefusedError") && !strings.Contains(r.Output, "CONNECTED"), "refused"
		}},
		{"signal a process outside", bashCall(fmt.Sprintf("kill -0 %d 2>&1; echo rc=$?; ls /proc/%d 2>&1 | head -1", os.Getpid(), os.Getpid())), func(r *event.ToolCompleted) (bool, string) {
			return strings.Contains(r.Output, "rc=1"), "no such process"
		}},
		{"ptrace a process outside", bashCall(fmt.Sprintf(`python3 -c 'import ctypes; print("ATTACHED" if ctypes.CDLL(None, use_errno=True).ptrace(16, %d, 0, 0) == 0 else "refused")' 2>&1`, os.Getpid())), func(r *event.ToolCompleted) (bool, string) {
			return strings.Contains(r.Output, "refused") && !strings.Contains(r.Output, "ATTACHED"), "refused"
		}},
		{"write to the root filesystem", bashCall("for f in /x /usr/x /etc/x /bin/x /skills/x; do (echo x > $f) 2>/dev/null && echo WROTE $f; done; echo done"), func(r *event.ToolCompleted) (bool, string) {
			return !strings.Contains(r.Output, "WROTE"), "read-only"
		}},
		{"plant symlinks out of /workspace", bashCall("ln -sfn " + data + " /workspace/data-link && ln -sfn /etc /workspace/etc-link && echo planted"), func(r *event.ToolCompleted) (bool, string) {
			return true, "planted (harmless inside the sandbox)"
		}},
		{"write through a symlink with the Write tool", modeltest.Call{Name: "Write", Input: map[string]any{"file_path": "/workspace/data-link/pwned", "content": canary}}, func(r *event.ToolCompleted) (bool, string) {
			_, err := os.Stat(filepath.Join(data, "pwned"))
			return r.IsError && os.IsNotExist(err), "refused"
		}},
		{"write outside with ..", modeltest.Call{Name: "Write", Input: map[string]any{"file_path": "/workspace/../pwned", "content": canary}}, func(r *event.ToolCompleted) (bool, string) {
			return r.IsError, "refused"
		}},
		{"inject into the terminal (TIOCSTI)", bashCall(`python3 -c 'import fcntl, termios; fcntl.ioctl(0, termios.TIOCSTI, b"x"); print("INJECTED")' 2>&1`), func(r *event.ToolCompleted) (bool, string) {
			return strings.Contains(r.Output, "OSError") && !strings.Contains(r.Output, "INJECTED"), "no terminal"
		}},
		{"fork bomb", bashCall(":(){ :|:& };:; sleep 1; echo bombed"), func(r *event.ToolCompleted) (bool, string) {
			return strings.Contains(r.Output, "Resource temporarily unavailable"), "bounded by the process limit"
		}},
		// Given a minute, not the suite's 3 s: on a loaded machine the
		// allocations, held to the sandbox's share of the CPU, may take
		// longer than that to reach the memory limit.
		{"allocate until out of memory", modeltest.Call{Name: "Bash", Input: map[string]any{"command": "tail /dev/zero", "timeout": 60000}}, func(r *event.ToolCompleted) (bool, string) {
			// Whichever comes first: the process's address space, or the
			// sandbox's memory cgroup.
			return r.IsError && !r.TimedOut && (strings.Contains(r.Output, "memory exhausted") || strings.Contains(r.Output, "The sandbox ran out of memory")), "stopped by the memory limit"
		}},
		{"hold memory in several processes", bashCall(`for i in 1 2 3 4 5; do python3 -c 'import time; b = b"x" * (160 << 20); time.sleep(3)' & done; wait; echo held`), func(r *event.ToolCompleted) (bool, string) {
			return r.IsError && strings.Contains(r.Output, "The sandbox ran out of memory"), "stopped by the sandbox's memory cgroup"
		}},
		{"set up io_uring, userfaultfd, bpf", bashCall(`python3 -c 'import ctypes; libc = ctypes.CDLL(None, use_errno=True); print([(libc.syscall(n, *a), ctypes.get_errno()) for n, a in ((425, (8, 0)), (323, (1,)), (321, (0, 0, 0)))])' 2>&1`), func(r *event.ToolCompleted) (bool, string) {
			return strings.Contains(r.Output, "[(-1, 1), (-1, 1), (-1, 1)]"), "EPERM from the seccomp filter"
		}},
		{"fill the disk", bashCall("head -c 100M /dev/zero > big; for i in 1 2 3 4; do head -c 6M /dev/zero > f$i; done; ls -s"), func(r *event.ToolCompleted) (bool, string) {
			return r.IsError && strings.Contains(r.Output, "over its limit"), "stopped by the file size and workspace limits"
		}},
		{"run past the timeout", bashCall("sleep 30"), func(r *event.ToolCompleted) (bool, string) {
			return r.TimedOut, "killed at the timeout"
		}},
		// With egress on, the proxy is the one way out, and it reaches no
		// address of the node, whatever the policy allows.
		{"reach a host port through the proxy", bashCall("for u in http://127.0.0.1:" + tcpPort + "/ http://localhost:" + tcpPort + "/ https://127.0.0.1:" + tcpPort + "/ http://[::1]:" + tcpPort + "/ http://0.0.0.0:" + tcpPort + "/; do curl -sS -m 5 --noproxy '' -x " + egressapi.ProxyURL + " -o /dev/null -w \"code=%{http_code}\\n\" $u 2>&1; done"), func(r *event.ToolCompleted) (bool, string) {
			return reached.Load() == 0 && !strings.Contains(r.Output, "code=200") && strings.Contains(r.Output, "code=403"), "refused by egress"
		}},
		{"read egress's CA key and sockets", bashCall("ls -a /run/corral/egress; cat " + data + "/egress/ca-key.pem /run/corral/egress/*key* 2>&1; ls " + data + "/egress 2>&1"), func(r *event.ToolCompleted) (bool, string) {
			return !strings.Contains(r.Output, "PRIVATE KEY") && !strings.Contains(r.Output, "control.sock"), "out of sight"
		}},
		{"still works afterwards", bashCall("rm -f big f1 f2 f3 f4; echo alive"), func(r *event.ToolCompleted) (bool, string) {
			return !r.IsError && strings.Contains(r.Output, "alive"), "the sandbox is fine"
		}},
	}
	calls := make([]modeltest.Call, len(attempts))
	for i, a := range attempts {
		calls[i] = a.call
	}
	// In the process's real environment too: the harness and the
	// sandbox-manager run in this process.
	t.Setenv("OPENAI_API_KEY", "sk-escape-canary")
	p, _ := startDevAt(t, natstest.FreeAddr(t), data, steps(echoResults, calls...), map[string]string{
		"OPENAI_API_KEY":                 "sk-escape-canary",
		"CORRAL_SANDBOX_TIMEOUT":         "3s",
		"CORRAL_SANDBOX_MEMORY_BYTES":    fmt.Sprint(512 << 20),
		"CORRAL_SANDBOX_FILE_BYTES":      fmt.Sprint(8 << 20),
		"CORRAL_SANDBOX_WORKSPACE_BYTES": fmt.Sprint(20 << 20),
		"CORRAL_SANDBOX_PROCESSES":       "256",
		// Every attempt runs; none waits for a reviewer. The sandbox may
		// reach any host through egress.
		"CORRAL_POLICY_FILE": writeTemp(t, "rules: []\negress:\n  - name: open\n    when: \"true\"\n    decision: allow\n"),
	})
	code, _, stderr := p.corral(t, "run", "--tenant", "acme", "--user", "mallory", "break out")
	if code != 0 {
		t.Fatalf("corral run exited %d: %s", code, stderr)
	}
	rs := results(p.events(t, sessionOf(t, stderr)))
	if len(rs) != len(attempts) {
		t.Fatalf("%d results for %d attempts", len(rs), len(attempts))
	}
	var table strings.Builder
	fmt.Fprintf(&table, "\n%-46s %-5s %s\n", "attempt", "held", "outcome")
	for i, a := range attempts {
		ok, why := a.held(rs[i])
		mark := "yes"
		if !ok {
			mark = "NO"
			t.Errorf("%s: not held: %s", a.name, oneLine(rs[i].Output, 300))
		}
		fmt.Fprintf(&table, "%-46s %-5s %s: %s\n", a.name, mark, why, oneLine(rs[i].Output, 90))
	}
	t.Log(table.String())
	// scripts/test.sh prints it, so that every run shows what was tried.
	if f := os.Getenv("CORRAL_ESCAPE_REPORT"); f != "" {
		if err := os.WriteFile(f, []byte(table.String()[1:]), 0o644); err != nil {
			t.Error(err)
		}
	}
	if n := reached.Load() + udpReached.Load(); n != 0 {
		t.Errorf("the host's listeners were reached %d times", n)
	}
	for _, f := range []string{"/x", "/usr/x", "/etc/x", "/bin/x", filepath.Join(data, "pwned")} {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("%s was written on the host", f)
		}
	}
}
