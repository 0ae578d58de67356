package main

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
)

func getPage(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The platform's metrics tell what happened, and a sandbox idle past its
// idle time runs no process, then resumes with the same files.
func TestMetricsAndSuspendResume(t *testing.T) {
	var mu sync.Mutex
	var whileIdle string
	var metricsURL string
	script := func(c modeltest.Conversation) (modeltest.Turn, error) {
		switch modeltest.Turns(c) {
		case 0:
			return modeltest.Turn{Calls: []modeltest.Call{bash("echo kept > f; sleep 60 & echo started")}}, nil
		case 1:
			// The model thinks for longer than the idle time.
			time.Sleep(1500 * time.Millisecond)
			resp, err := http.Get(metricsURL)
			if err != nil {
				return modeltest.Turn{}, err
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			mu.Lock()
			whileIdle = string(b)
			mu.Unlock()
			return modeltest.Turn{Calls: []modeltest.Call{bash("cat f; pgrep -c sleep || true")}}, nil
		}
		return modeltest.Turn{Text: "results: " + modeltest.Results(c)[0].Content}, nil
	}
	p := startDev(t, script, map[string]string{"CORRAL_SANDBOX_IDLE_TIMEOUT": "300ms"})
	base := "http://" + p.getenv("CORRAL_METRICS_LISTEN")
	metricsURL = base + "/metrics"
	out := p.runOK(t, "acme", "ada", "suspend and resume")
	wantIn(t, "answer", out, "kept")
	// The background sleep of the first call died with it: nothing of the
	// first sandbox is left in the resumed one.
	wantIn(t, "answer", out, "kept\n0")

	mu.Lock()
	idle := whileIdle
	mu.Unlock()
	wantIn(t, "metrics while idle", idle, `corral_sandbox_sandboxes{state="running"} 0`, `corral_sandbox_sandboxes{state="suspended"} 1`)

	wants := []string{
		`corral_sandbox_start_seconds_count{kind="cold"} 1`,
		`corral_sandbox_start_seconds_count{kind="resume"} 1`,
		`corral_sandbox_call_seconds_count{outcome="ok",tool="Bash"} 2`,
		`corral_sandbox_snapshot_bytes_count 2`,
		`corral_harness_tool_calls_total{route="sandbox",tool="Bash"} 2`,
		`corral_harness_sessions_ended_total{outcome="completed"} 1`,
		`corral_harness_model_seconds_count{outcome="ok",provider="openai"} 3`,
		`corral_approval_pending 0`,
		// The session completed: its sandbox ended, its workspace kept.
		`corral_sandbox_sandboxes{state="running"} 0`,
		`corral_sandbox_sandboxes{state="suspended"} 0`,
		`corral_sandbox_sandboxes{state="stopped"} 1`,
		"go_goroutines", "process_resident_memory_bytes",
	}
	// The harness counts an ended session just after recording its end,
	// which corral run may see first.
	natstest.WaitFor(t, 5*time.Second, func() error {
		code, body := getPage(t, metricsURL)
		if code != http.StatusOK {
			t.Fatalf("GET /metrics: %d", code)
		}
		if i := slices.IndexFunc(wants, func(w string) bool { return !strings.Contains(body, w) }); i >= 0 {
			return fmt.Errorf("metrics lack %q:\n%s", wants[i], body)
		}
		return nil
	})
	if code, body := getPage(t, base+"/healthz"); code != http.StatusOK || strings.TrimSpace(body) != "ok" {
		t.Errorf("GET /healthz: %d %q", code, body)
	}
}
