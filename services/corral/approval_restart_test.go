package main

import (
	"crypto/ed25519"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"corral.dev/pkg/event"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
)

// TestApprovalSurvivesAKill kills the approval service (SIGKILL, its own
// process) while a call waits for a reviewer: after a restart the reviewer
// still sees it, and approving it finishes the session.
func TestApprovalSurvivesAKill(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "approval")
	if out, err := exec.Command(goBin, "build", "-o", bin, "corral.dev/services/approval/cmd/approval").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	srv, _, js := natstest.Run(t)
	fake := modeltest.New(t, byPrompt(map[string][]modeltest.Call{"push": {bash("echo git push ok")}}))
	_, key, _ := ed25519.GenerateKey(nil)
	env := map[string]string{
		"OPENAI_BASE_URL": fake.URL() + "/v1", "OPENAI_API_KEY": "sk-test", "CORRAL_MODEL": "openai:gpt-test",
		"CORRAL_DATA_DIR": t.TempDir(), "CORRAL_SHUTDOWN_GRACE": "1s", "CORRAL_NATS_URL": srv.ClientURL(),
		"CORRAL_APPROVAL_PUBLIC_KEY": event.EncodeKey(key.Public().(ed25519.PublicKey)),
		"CORRAL_REVIEWER_TOKEN":      graceToken,
	}
	getenv := func(k string) string { return env[k] }
	runServices(t, js, getenv, true)
	logFile, err := os.Create(filepath.Join(t.TempDir(), "approval.log"))
	if err != nil {
		t.Fatal(err)
	}
	startApproval := func() *exec.Cmd {
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(), "CORRAL_NATS_URL="+srv.ClientURL(), "CORRAL_APPROVAL_SIGNING_KEY="+event.EncodeKey(key), "CORRAL_LOG_LEVEL=debug",
			"CORRAL_REVIEWER_TOKENS=grace="+graceToken)
		cmd.Stdout, cmd.Stderr = logFile, logFile
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	svc := startApproval()

	p := &platform{url: srv.ClientURL(), getenv: getenv, model: fake}
	run := p.runBackground(t, "acme", "push")
	id, _ := p.pending(t, "acme")
	if err := svc.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = svc.Wait()
	if code, _, stderr := p.corral(t, "approvals", "--tenant", "acme"); code == 0 || !strings.Contains(stderr, "approval service is not running") {
		t.Errorf("corral approvals with the service down: exit %d, %s", code, stderr)
	}

	startApproval()
	again, listing := p.pending(t, "acme")
	if again != id {
		t.Fatalf("after the restart the pending approval is %s, want %s:\n%s", again, id, listing)
	}
	if code, _, stderr := p.corral(t, "approve", "--tenant", "acme", "--user", "grace", id.String()); code != 0 {
		t.Fatalf("corral approve exited %d: %s", code, stderr)
	}
	r := wait(t, run)
	if r.code != 0 {
		b, _ := os.ReadFile(logFile.Name())
		t.Fatalf("corral run exited %d:\n%s\napproval log:\n%s", r.code, r.stderr, b)
	}
	wantIn(t, "answer", r.stdout, "git push ok")
}
