package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/modeltest"
)

// BenchmarkResume measures how long an in-flight session stands still when
// its harness dies: from SIGKILL of a harness process that is waiting for
// the model in the middle of a session, to the session's next tool call on
// the queue (kill). The harness is restarted at once, as a supervisor would;
// the step it was running is taken up again once its message's ack wait and
// the session's lease run out, both [bus.LeaseTTL]. Each op is one kill.
// Its baseline (live) is the same moment with the harness left alive: from
// the model's answer to the next tool call.
func BenchmarkResume(b *testing.B) {
	b.Run("kill", func(b *testing.B) { resume(b, true) })
	b.Run("live", func(b *testing.B) { resume(b, false) })
}

func resume(b *testing.B, kill bool) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		b.Skip("bwrap is not on PATH")
	}
	bin := filepath.Join(b.TempDir(), "harness")
	if out, err := exec.Command("go", "build", "-o", bin, "corral.dev/services/harness/cmd/harness").CombinedOutput(); err != nil {
		b.Fatalf("build harness: %v\n%s", err, out)
	}

	// Each session's second model turn blocks until the harness asking it
	// has been killed; asked again, it answers at once.
	waiting := make(chan string, 1)
	release := make(chan struct{})
	var mu sync.Mutex
	blocked := map[string]bool{}
	srv, js, getenv := benchPlatform(b, func(c modeltest.Conversation) (modeltest.Turn, error) {
		key := c.Messages[0].Text
		switch modeltest.Turns(c) {
		case 0:
			return modeltest.Turn{Calls: []modeltest.Call{{Name: "Bash", Input: map[string]any{"command": "true"}}}}, nil
		case 1:
			mu.Lock()
			first := !blocked[key]
			blocked[key] = true
			mu.Unlock()
			if first {
				waiting <- key
				<-release
			}
			return modeltest.Turn{Calls: []modeltest.Call{{Name: "Bash", Input: map[string]any{"command": "true"}}}}, nil
		}
		return modeltest.Turn{Text: "done"}, nil
	})
	runServices(b, js, getenv, false)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()

	start, _ := harnessProcess(b, bin, getenv)
	harness := start()
	defer func() { _ = harness.Process.Kill(); _ = harness.Wait() }()

	var ds []time.Duration
	b.ResetTimer()
	for i := range b.N {
		calls, err := nc.SubscribeSync("tools.>")
		if err != nil {
			b.Fatal(err)
		}
		session, done := startSessionPrompt(b, benchClient{js: js, tenant: "bench", user: "bench"}, fmt.Sprint("resume ", i))
		key := <-waiting
		if key != fmt.Sprint("resume ", i) {
			b.Fatalf("waiting in %q, want resume %d", key, i)
		}
		// The first call is on the queue already; drain it.
		if _, err := calls.NextMsg(time.Minute); err != nil {
			b.Fatal(err)
		}
		from := time.Now()
		if kill {
			_ = harness.Process.Kill()
			_ = harness.Wait()
			release <- struct{}{}
			harness = start()
		} else {
			release <- struct{}{}
		}
		m, err := calls.NextMsg(time.Minute)
		if err != nil {
			b.Fatalf("no tool call after the kill: %v", err)
		}
		ds = append(ds, time.Since(from))
		if _, s, err := bus.ParseSubject(m.Subject); err != nil || s != session {
			b.Fatalf("next call on %s, want session %s", m.Subject, session)
		}
		<-done
		_ = calls.Unsubscribe()
	}
	b.StopTimer()
	percentiles(b, ds, "")
}

// harnessProcess returns what starts the harness binary bin as a process
// of its own, with the model, server, turn limit and call key of getenv
// (and the variables more names), and the file it logs to; the process
// dies with the test.
func harnessProcess(tb testing.TB, bin string, getenv func(string) string, more ...string) (start func() *exec.Cmd, log string) {
	tb.Helper()
	var env []string
	for _, k := range append([]string{"OPENAI_BASE_URL", "OPENAI_API_KEY", "CORRAL_MODEL", "CORRAL_NATS_URL", "CORRAL_MAX_TURNS", "CORRAL_CALL_SIGNING_KEY"}, more...) {
		env = append(env, k+"="+getenv(k))
	}
	logf, err := os.Create(filepath.Join(tb.TempDir(), "harness.log"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { logf.Close() })
	return func() *exec.Cmd {
		cmd := exec.Command(bin)
		cmd.Env, cmd.Stdout, cmd.Stderr = env, logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			tb.Fatal(err)
		}
		return cmd
	}, logf.Name()
}
