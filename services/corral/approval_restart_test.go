package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"corral.dev/pkg/credential"
	"corral.dev/pkg/event"
	"corral.dev/pkg/modeltest"
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
	// The deployed configuration, every service under its own user: the
	// approval service's, in a process of its own.
	d := startDeployment(t, byPrompt(map[string][]modeltest.Call{"clean": {bash("echo rm -rf ok")}}), nil, credential.UserApproval)
	p := d.platform
	logFile, err := os.Create(filepath.Join(t.TempDir(), "approval.log"))
	if err != nil {
		t.Fatal(err)
	}
	startApproval := func() *exec.Cmd {
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(), "CORRAL_NATS_URL="+d.url, "CORRAL_APPROVAL_SIGNING_KEY="+event.EncodeKey(d.key), "CORRAL_LOG_LEVEL=debug",
			"CORRAL_NATS_USER="+credential.UserApproval, "CORRAL_NATS_PASSWORD="+password(credential.UserApproval),
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

	run := p.runBackground(t, "acme", "clean")
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
	if code, _, stderr := p.corral(t, "approve", id.String()); code != 0 {
		t.Fatalf("corral approve exited %d: %s", code, stderr)
	}
	r := wait(t, run)
	if r.code != 0 {
		b, _ := os.ReadFile(logFile.Name())
		t.Fatalf("corral run exited %d:\n%s\napproval log:\n%s", r.code, r.stderr, b)
	}
	wantIn(t, "answer", r.stdout, "rm -rf ok")
}
