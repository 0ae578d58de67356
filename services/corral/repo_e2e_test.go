package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"corral.dev/pkg/event"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/upstreamtest"
)

// noEgressPolicy lets the sandboxes reach nothing.
const noEgressPolicy = "rules: []\n"

// forgePolicy lets acme's sessions fetch from the forge and nothing else
// (so their clones too); globex's may not reach it at all.
const forgePolicy = `
rules: []
tenants:
  acme:
    egress:
      - name: forge-fetch
        when: host == "git.example.test" && (path.endsWith("/info/refs") || path.endsWith("/git-upload-pack"))
        decision: allow
  globex:
    egress:
      - name: no-forge
        when: host == "git.example.test"
        decision: deny
        reason: the forge is off limits
`

// A session started from a private repository: the repository is cloned
// through egress with the tenant's vault token before the model's first
// turn, the model runs its tests, fixes a file and runs them again, and
// `corral workspace diff` shows exactly that fix. The token is nowhere in
// the sandbox, its workspace or the platform's data; the forge served one
// clone.
func TestSessionStartsFromAPrivateRepository(t *testing.T) {
	token := "ghp_" + strings.Repeat("r3p0", 9)
	up := newUpstreams(t)
	forge := upstreamtest.Git(t, up.ca, "git.example.test", token)
	forge.NewRepo(t, "app", map[string]string{
		"README.md":  "the app\n",
		"calc.txt":   "2+2=5\n",
		"test.sh":    "grep -qx '2+2=4' calc.txt && echo PASS || { echo FAIL; exit 1; }\n",
		"lib/util.c": "int one(void) { return 1; }\n",
	})
	up.add(forge.Upstream)
	// Looked for by a part of it, so that the command itself does not
	// put the token in the session's log.
	part := token[4:28]
	leak := "grep -rsl " + part + " /workspace /home /tmp /run /opt 2>/dev/null; env | grep -c " + part + "; git -C /workspace config --get remote.origin.url"
	var firstPrompt string
	p := startDev(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
		turn := 0
		for _, m := range c.Messages {
			if m.Role == "assistant" {
				turn++
			}
		}
		if turn == 0 {
			firstPrompt = c.Messages[0].Text
		}
		switch {
		case !strings.Contains(c.Messages[0].Text, "make the tests pass"):
			return modeltest.Turn{Text: "nothing to do"}, nil
		case turn == 0:
			return modeltest.Turn{Calls: []modeltest.Call{bash("cd /workspace && sh test.sh; echo tests=$?")}}, nil
		case turn == 1:
			return modeltest.Turn{Calls: []modeltest.Call{{Name: "Edit", Input: map[string]any{
				"file_path": "/workspace/calc.txt", "old_string": "2+2=5", "new_string": "2+2=4"}}}}, nil
		case turn == 2:
			return modeltest.Turn{Calls: []modeltest.Call{bash("cd /workspace && sh test.sh; echo tests=$?; " + leak)}}, nil
		}
		var out []string
		for _, r := range modeltest.Results(c) {
			out = append(out, r.Content)
		}
		return modeltest.Turn{Text: "done: " + strings.Join(out, " | ")}, nil
	}, up.env(t, forgePolicy))
	p.vault(t, "acme", "ada", token, "forge", "--host", "git.example.test", "--basic-user", "x-access-token")

	code, stdout, stderr := p.corral(t, "run", "--tenant", "acme", "--user", "ada",
		"--repo", "https://git.example.test/app.git", "--ref", "main", "make the tests pass")
	if code != 0 {
		t.Fatalf("corral run exited %d:\n%s", code, stderr)
	}
	session := sessionOf(t, stderr)
	wantIn(t, "the model's first prompt", firstPrompt, "checkout of the git repository https://git.example.test/app.git at main (commit ", "4 files")
	wantIn(t, "the answer", stdout, "PASS", "tests=0", "https://git.example.test/app.git")
	wantIn(t, "what changed", stderr, "calc.txt", "modified", "+1 -1", "1 files changed, 1 insertions(+), 1 deletions(-)")
	if strings.Count(stdout, token) > 0 || strings.Contains(stdout, "/workspace/") {
		t.Errorf("the sandbox saw the token:\n%s", stdout)
	}
	var tests []string
	for _, ev := range p.events(t, session) {
		if r, ok := ev.(*event.ToolCompleted); ok && strings.Contains(r.Output, "tests=") {
			tests = append(tests, r.Output)
		}
	}
	if len(tests) != 2 || !strings.Contains(tests[0], "FAIL") || !strings.Contains(tests[0], "tests=1") {
		t.Errorf("the tests did not fail before the fix: %q", tests)
	}

	patch := p.corralOK(t, "workspace", session.String(), "diff", "--tenant", "acme", "--user", "ada")
	want := "diff --git a/calc.txt b/calc.txt\n--- a/calc.txt\n+++ b/calc.txt\n@@ -1 +1 @@\n-2+2=5\n+2+2=4\n"
	if patch != want {
		t.Errorf("workspace diff:\n%s\nwant:\n%s", patch, want)
	}
	// The patch is git's: it applies to a checkout of the ref.
	checkout := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = checkout
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	git("init", "-q")
	if err := os.WriteFile(filepath.Join(checkout, "calc.txt"), []byte("2+2=5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(checkout, "fix.patch"), []byte(patch), 0o644); err != nil {
		t.Fatal(err)
	}
	git("apply", "fix.patch")
	if got, _ := os.ReadFile(filepath.Join(checkout, "calc.txt")); string(got) != "2+2=4\n" {
		t.Errorf("the patch applied makes calc.txt %q", got)
	}
	wantIn(t, "diff --stat", p.corralOK(t, "workspace", session.String(), "diff", "--stat", "--tenant", "acme", "--user", "ada"),
		"calc.txt", "+1 -1", "1 files changed")

	// A batch job from the repository: its result says what changed, and
	// --diffs writes its patch.
	jobs := filepath.Join(t.TempDir(), "jobs.jsonl")
	line := `{"id": "fix/1", "prompt": "make the tests pass", "repo": {"url": "https://git.example.test/app.git", "ref": "main"}}` + "\n"
	if err := os.WriteFile(jobs, []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := p.corral(t, "batch", "submit", "--tenant", "acme", "--user", "ada", jobs); code != 0 {
		t.Fatalf("batch submit exited %d:\n%s", code, stderr)
	}
	diffs := filepath.Join(t.TempDir(), "diffs")
	results := p.corralOK(t, "batch", "results", "--tenant", "acme", "--user", "ada", "--diffs", diffs, jobs)
	wantIn(t, "the batch's results", results, `"status":"completed"`, `"changes":{"files":[{"path":"calc.txt","status":"modified","insertions":1,"deletions":1}]`, `"diff":"`+diffs+"/fix_1-")
	written, _ := filepath.Glob(filepath.Join(diffs, "fix_1-*.patch"))
	if len(written) != 1 {
		t.Fatalf("--diffs wrote %q", written)
	}
	if got, _ := os.ReadFile(written[0]); string(got) != want {
		t.Errorf("the job's patch:\n%s\nwant:\n%s", got, want)
	}

	// One clone per session: one fetch's advertisement asked for each.
	fetches := 0
	for _, r := range forge.Requests() {
		if strings.HasPrefix(r, "GET /app.git/info/refs") {
			fetches++
		}
	}
	if fetches != 2 {
		t.Errorf("the forge served %d fetches for two sessions, want 2: %q", fetches, forge.Requests())
	}
	notOnDisk(t, p.data, token)
}

// A session whose repository cannot be cloned fails before the model is
// asked, saying why: a ref the repository does not have, or a forge that
// refuses the (missing) credentials.
func TestSessionFromARepositoryFailsClearly(t *testing.T) {
	token := "ghp_" + strings.Repeat("f41l", 9)
	up := newUpstreams(t)
	forge := upstreamtest.Git(t, up.ca, "git.example.test", token)
	forge.NewRepo(t, "app", map[string]string{"README.md": "the app\n"})
	up.add(forge.Upstream)
	asked := 0
	p := startDev(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
		asked++
		return modeltest.Turn{Text: "asked"}, nil
	}, up.env(t, forgePolicy))
	p.vault(t, "acme", "ada", token, "forge", "--host", "git.example.test", "--basic-user", "x-access-token")

	for _, tc := range []struct {
		tenant, user, ref string
		want              []string
	}{
		{"acme", "ada", "no-such-branch", []string{"workspace_failed", "no such branch, tag or commit", "no-such-branch"}},
		{"acme", "bob", "main", []string{"workspace_failed", "refused the credentials", "corral vaults create"}},
		{"globex", "ada", "main", []string{"workspace_failed", "egress refused it", "the forge is off limits"}},
		{"initech", "ada", "main", []string{"workspace_failed", "egress refused it", "no egress rule allows git.example.test"}},
	} {
		code, _, stderr := p.corral(t, "run", "--tenant", tc.tenant, "--user", tc.user,
			"--repo", "https://git.example.test/app.git", "--ref", tc.ref, "look")
		if code != 1 {
			t.Errorf("%s of %s at %s: exit %d, want 1:\n%s", tc.user, tc.tenant, tc.ref, code, stderr)
		}
		wantIn(t, fmt.Sprintf("%s of %s at %s", tc.user, tc.tenant, tc.ref), stderr, tc.want...)
	}
	if asked != 0 {
		t.Errorf("the model was asked %d times about workspaces that were never prepared", asked)
	}
	code, _, stderr := p.corral(t, "run", "--tenant", "acme", "--user", "ada", "--repo", "https://x:y@git.example.test/app.git", "look")
	if code != 1 {
		t.Errorf("credentials in the URL: exit %d, want 1", code)
	}
	wantIn(t, "credentials in the URL", stderr, "invalid_request", "put the token in a vault")
}
