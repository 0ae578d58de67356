package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
)

// TestSessionMovesWhenItsNodeDies runs two sandbox-manager processes. The
// session starts on the first; while its second call runs, the first is
// killed with SIGKILL; the session finishes on the second, with the
// workspace restored from the last snapshot, and the model is told (with
// the interrupted call's result, the first the second node records).
func TestSessionMovesWhenItsNodeDies(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "sandbox-manager")
	if out, err := exec.Command(goBin, "build", "-o", bin, "corral.dev/services/sandbox-manager/cmd/sandbox-manager").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	srv, _, js := natstest.Run(t)
	fake := modeltest.New(t, steps(echoResults,
		bash("echo kept > f && echo one"),
		bash("echo lost > g; sleep 60"),
		bash("cat f; ls"),
	))
	env := map[string]string{
		"OPENAI_BASE_URL": fake.URL() + "/v1", "OPENAI_API_KEY": "sk-test", "CORRAL_MODEL": "openai:gpt-test",
		"CORRAL_SHUTDOWN_GRACE": "1s", "CORRAL_NATS_URL": srv.ClientURL(),
	}
	maps.Copy(env, callKeys)
	runComponents(t, envOn(js, func(k string) string { return env[k] }), credential.UserHarness)
	ctx := context.Background()

	node := func(name string) *exec.Cmd {
		cmd := exec.Command(bin)
		cmd.Env = append(append(os.Environ(), callKeyEnv()...), "CORRAL_NATS_URL="+srv.ClientURL(), "CORRAL_DATA_DIR="+filepath.Join(t.TempDir(), name), "CORRAL_SHUTDOWN_GRACE=1s")
		log, err := os.Create(filepath.Join(t.TempDir(), name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = log, log
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	first := node("first")

	p := &platform{url: srv.ClientURL(), getenv: func(k string) string { return env[k] }, model: fake}
	run := p.runBackground(t, "acme", "move")
	// Wait until the second call runs on the first node.
	calls, err := js.KeyValue(ctx, bus.BucketCalls)
	if err != nil {
		t.Fatal(err)
	}
	var session uuid.UUID
	natstest.WaitFor(t, 30*time.Second, func() error {
		var all []any
		for _, ev := range p.eventsWhere(t, func(any) bool { return true }) {
			all = append(all, ev)
		}
		evs := dispatches(all)
		if len(evs) < 2 {
			return fmt.Errorf("%d calls out", len(evs))
		}
		session = evs[1].Session
		e, err := calls.Get(ctx, bus.CallKey(evs[1].Tenant, evs[1].Session, evs[1].Call))
		if err != nil {
			return err
		}
		if !strings.HasSuffix(string(e.Value()), "-"+strconv.Itoa(first.Process.Pid)) {
			return fmt.Errorf("the call is marked by %s", e.Value())
		}
		return nil
	})
	time.Sleep(300 * time.Millisecond) // into its sleep
	node("second")
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r := wait(t, run)
	if r.code != 0 {
		t.Fatalf("corral run exited %d:\n%s", r.code, r.stderr)
	}
	rs := results(p.events(t, session))
	if len(rs) != 3 {
		t.Fatalf("%d results, want 3", len(rs))
	}
	if !strings.Contains(rs[1].Output, "interrupted") {
		t.Errorf("the call the dead node ran: %q, want it reported interrupted", rs[1].Output)
	}
	// The second node tells the model with the first result it records.
	if !strings.Contains(rs[1].Output, "moved to another node") {
		t.Errorf("the first result of the second node lacks the note that the sandbox moved:\n%s", rs[1].Output)
	}
	last := rs[2].Output
	if !strings.Contains(last, "kept") {
		t.Errorf("the call on the second node lacks the file written before the snapshot:\n%s", last)
	}
	if strings.Contains(last, "g\n") {
		t.Errorf("a file written after the last snapshot came back:\n%s", last)
	}
}
