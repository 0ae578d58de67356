package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"corral.dev/pkg/modeltest"
)

// A held Edit of a skill shows with every argument (replace_all among
// them) and a diff of the whole file with its context, marked as a
// preview that the decision does not sign.
func TestHeldSkillEditShowsItsDiff(t *testing.T) {
	p := startDev(t, byPrompt(map[string][]modeltest.Call{
		"canary": {
			read("/skills/deploy/SKILL.md"),
			{Name: "Edit", Input: map[string]any{"file_path": "/skills/deploy/SKILL.md", "old_string": "make deploy", "new_string": "make deploy-canary", "replace_all": true}},
		},
	}), nil)
	dir := t.TempDir()
	skill := "---\nname: deploy\ndescription: How we ship\n---\nFirst run make deploy.\nThen check the dashboard.\nIf it fails, run make deploy again.\n"
	if err := os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte(skill), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := p.corral(t, "skills", "push", dir, "--tenant", "acme"); code != 0 {
		t.Fatalf("skills push exited %d: %s", code, stderr)
	}
	run := p.runBackground(t, "acme", "canary")
	id, _ := p.pending(t, "acme")
	code, stdout, stderr := p.corral(t, "approvals", "show", "--tenant", "acme", id.String())
	if code != 0 {
		t.Fatalf("corral approvals show exited %d: %s", code, stderr)
	}
	wantIn(t, "corral approvals show", stdout, "tool: Edit\n", "old_string: make deploy\n", "new_string: make deploy-canary\n", "replace_all: true\n",
		"preview of the change (informational, not what is approved):\n",
		"--- a/skills/deploy/SKILL.md\n+++ b/skills/deploy/SKILL.md\n",
		"@@ -2,6 +2,6 @@\n name: deploy\n description: How we ship\n ---\n-First run make deploy.\n+First run make deploy-canary.\n Then check the dashboard.\n-If it fails, run make deploy again.\n+If it fails, run make deploy-canary again.\n")
	if code, _, stderr := p.corral(t, "approve", "--tenant", "acme", "--user", "grace", id.String()); code != 0 {
		t.Fatalf("corral approve exited %d: %s", code, stderr)
	}
	if r := wait(t, run); r.code != 0 || !strings.Contains(r.stdout, "Edited /skills/deploy/SKILL.md") {
		t.Fatalf("corral run exited %d:\n%s%s", r.code, r.stdout, r.stderr)
	}
}
