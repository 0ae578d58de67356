package main

import (
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"corral.dev/pkg/modeltest"
)

// The harness's API keys never reach the sandbox: neither the environment
// of a Bash call nor any /proc/*/environ it can read shows them.
func TestSandboxNeverSeesTheAPIKey(t *testing.T) {
	const canary = "sk-canary-4b7d1f0e9a"
	t.Setenv("OPENAI_API_KEY", canary)
	t.Setenv("ANTHROPIC_API_KEY", canary)
	p := startDev(t, steps(echoResults,
		modeltest.Call{Name: "Bash", Input: map[string]any{"command": "env; for f in /proc/*/environ; do echo \"== $f\"; tr '\\0' '\\n' < $f; done; echo END"}},
		// /usr is the host's read-only system tree (gigabytes); everything
		// Corral could have put there is elsewhere.
		modeltest.Call{Name: "Bash", Input: map[string]any{"command": "grep -rs " + canary + " / --exclude-dir=proc --exclude-dir=sys --exclude-dir=usr | head -5; echo SEARCHED"}},
	), map[string]string{"OPENAI_API_KEY": canary, "ANTHROPIC_API_KEY": canary})
	code, stdout, stderr := p.corral(t, "run", "dump the environment")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "PATH=") || !strings.Contains(stdout, "END") || !strings.Contains(stdout, "SEARCHED") {
		t.Fatalf("the commands did not run as expected: %q", stdout)
	}
	if strings.Contains(stdout, canary) {
		t.Errorf("the sandbox saw the API key:\n%s", stdout)
	}
	if got := p.model.Requests()[0].APIKey; got != canary {
		t.Errorf("the model server got key %q, want the canary: the test would prove nothing", got)
	}
}

// From inside the sandbox the NATS port on 127.0.0.1 cannot be reached,
// and nothing outside /workspace can be written.
func TestSandboxIsolation(t *testing.T) {
	// The script needs the platform's own NATS port, known once it runs.
	var script atomic.Pointer[modeltest.Script]
	p := startDev(t, func(c modeltest.Conversation) (modeltest.Turn, error) { return (*script.Load())(c) }, nil)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(p.url, "nats://"))
	s := steps(echoResults,
		modeltest.Call{Name: "Bash", Input: map[string]any{"command": fmt.Sprintf("(exec 3<>/dev/tcp/127.0.0.1/%s) 2>/dev/null && echo NATS-REACHED || echo NATS-UNREACHABLE", port)}},
		modeltest.Call{Name: "Bash", Input: map[string]any{"command": "for f in /etc/x /usr/x /x /root/x " + p.data + "/x; do (echo x > $f) 2>/dev/null && echo WROTE $f || echo REFUSED $f; done"}},
		modeltest.Call{Name: "Bash", Input: map[string]any{"command": "echo ok > /workspace/inside && cat /workspace/inside"}},
	)
	script.Store(&s)
	code, stdout, stderr := p.corral(t, "run", "try to escape")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "NATS-UNREACHABLE") {
		t.Errorf("the sandbox reached NATS: %s", stdout)
	}
	if strings.Contains(stdout, "WROTE") || strings.Count(stdout, "REFUSED") != 5 {
		t.Errorf("writes outside /workspace: %s", stdout)
	}
	if !strings.Contains(stdout, "| ok") {
		t.Errorf("writing inside /workspace failed: %s", stdout)
	}
	if _, err := os.Stat(p.data + "/x"); err == nil {
		t.Errorf("the sandbox wrote into the data directory")
	}
}
