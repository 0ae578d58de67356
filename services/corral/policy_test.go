package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"corral.dev/pkg/logtest"
	"corral.dev/pkg/modeltest"
)

func TestPolicyCheck(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(`
tenants:
  acme:
    rules:
      - name: no-make
        when: tool == "Bash" && args.command.startsWith("make")
        decision: deny
        reason: acme builds in CI only
`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--tool", "Bash", "--args", `{"command":"rm -rf build"}`}, 3, "approve by rule risky-shell: the command deletes recursively or opens a remote shell"},
		{[]string{"--tool", "Bash", "--args", `{"command":"ssh build.example uptime"}`}, 3, "approve by rule risky-shell"},
		{[]string{"--tool", "Write", "--args", `{"file_path":"/skills/x/SKILL.md","content":"x"}`}, 3, "approve by rule skill-changes"},
		{[]string{"--tool", "Read", "--args", `{"file_path":"notes.md"}`}, 0, "allow (no rule matched)"},
		{[]string{"--file", file, "--tenant", "acme", "--tool", "Bash", "--args", `{"command":"make all"}`}, 1, "deny by rule no-make: acme builds in CI only"},
		{[]string{"--file", file, "--tenant", "other", "--tool", "Bash", "--args", `{"command":"make all"}`}, 0, "allow (no rule matched)"},
		{[]string{"--tool", "Bash", "--args", `{"cmd":"x"}`}, 2, `unknown field "cmd"`},
		{[]string{"--file", "/nonexistent.yaml", "--tool", "Bash"}, 2, "no such file"},
	} {
		var stdout, stderr logtest.Buffer
		code := run(t.Context(), append([]string{"policy", "check"}, tc.args...), func(string) string { return "" }, &stdout, &stderr)
		if code != tc.code || !strings.Contains(stdout.String()+stderr.String(), tc.want) {
			t.Errorf("policy check %v = %d, %q %q; want %d and %q", tc.args, code, stdout.String(), stderr.String(), tc.code, tc.want)
		}
	}
}

// The harness applies the policy: a denied call is not run, and one that
// needs an approval waits for it and, denied, is not run either; the model
// is told why.
func TestHarnessAppliesThePolicy(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(`
rules:
  - name: no-secrets
    when: tool == "Read" && path.endsWith(".env")
    decision: deny
    reason: environment files stay unread
  - name: risky-shell
    when: tool == "Bash" && args.command.matches("git push")
    decision: approve
    reason: pushes code
`), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startDev(t, steps(echoResults,
		modeltest.Call{Name: "Bash", Input: map[string]any{"command": "echo SECRET=1 > .env && echo ok"}},
		modeltest.Call{Name: "Read", Input: map[string]any{"file_path": "/workspace/.env"}},
		modeltest.Call{Name: "Bash", Input: map[string]any{"command": "touch pushed && git push"}},
		modeltest.Call{Name: "Bash", Input: map[string]any{"command": "ls"}},
	), map[string]string{"CORRAL_POLICY_FILE": file})
	run := p.runBackground(t, "acme", "try things")
	id, _ := p.pending(t, "acme")
	if code, _, stderr := p.corral(t, "deny", "--tenant", "acme", "--user", "grace", id.String(), "--reason", "not from here"); code != 0 {
		t.Fatalf("corral deny exited %d: %s", code, stderr)
	}
	r := wait(t, run)
	code, stdout, stderr := r.code, r.stdout, r.stderr
	if code != 0 {
		t.Fatalf("corral run exited %d: %s", code, stderr)
	}
	wantIn(t, "results", stdout, "refused by policy (rule no-secrets): environment files stay unread",
		"a reviewer (grace) denied this call, held under policy rule risky-shell: not from here")
	wantNotIn(t, "results", stdout, "SECRET=1", "pushed")
	session := sessionOf(t, stderr)
	if _, err := os.Stat(filepath.Join(p.data, "workspaces", "acme", session.String(), "pushed")); !os.IsNotExist(err) {
		t.Errorf("the call that needed approval ran: %v", err)
	}
	if dispatched := len(dispatches(p.events(t, session))); dispatched != 2 {
		t.Errorf("%d calls dispatched, want 2 (the refused ones never leave the harness)", dispatched)
	}
}
