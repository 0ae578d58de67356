package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/pgtest"
)

// byPrompt is a script that runs, for each prompt, its calls one per turn
// and then answers with every tool result seen, joined by " | ".
func byPrompt(plans map[string][]modeltest.Call) modeltest.Script {
	return func(c modeltest.Conversation) (modeltest.Turn, error) {
		calls, ok := plans[c.Messages[0].Text]
		if !ok {
			return modeltest.Turn{}, fmt.Errorf("no plan for prompt %q", c.Messages[0].Text)
		}
		return steps(echoResults, calls...)(c)
	}
}

func read(p string) modeltest.Call {
	return modeltest.Call{Name: "Read", Input: map[string]any{"file_path": p}}
}

func write(p, content string) modeltest.Call {
	return modeltest.Call{Name: "Write", Input: map[string]any{"file_path": p, "content": content}}
}

// runOK runs a session and returns its answer, failing the test if it fails.
func (p *platform) runOK(t *testing.T, tenant, user, prompt string) string {
	t.Helper()
	code, stdout, stderr := p.corral(t, "run", "--tenant", tenant, "--user", user, prompt)
	if code != 0 {
		t.Fatalf("corral run %q exited %d\n%s", prompt, code, stderr)
	}
	return strings.TrimSpace(stdout)
}

func wantIn(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, got)
		}
	}
}

func wantNotIn(t *testing.T, what, got string, nots ...string) {
	t.Helper()
	for _, n := range nots {
		if strings.Contains(got, n) {
			t.Errorf("%s has %q:\n%s", what, n, got)
		}
	}
}

// One user's session writes a memory; another user's later session of the
// same tenant reads it; another tenant's does not see it; private memories
// stay their user's. The same holds through the CLI.
func TestMemoriesAreSharedByTheTenant(t *testing.T) {
	forEachStore(t, testMemoriesAreShared)
}

// forEachStore runs a test against corral dev with its embedded store and
// with PostgreSQL (--database-url).
func forEachStore(t *testing.T, fn func(t *testing.T, env map[string]string)) {
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		fn(t, nil)
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		fn(t, map[string]string{"DATABASE_URL": pgtest.Schema(t)})
	})
}

func testMemoriesAreShared(t *testing.T, env map[string]string) {
	p := startDev(t, byPrompt(map[string][]modeltest.Call{
		"remember": {write("/memories/notes.md", "deploys go out with make ship\n"), write("/memories/private/todo.md", "ada's secret plan\n")},
		"recall":   {read("/memories/notes.md"), read("/memories/private/todo.md")},
		"list":     {{Name: "Glob", Input: map[string]any{"pattern": "**", "path": "/memories"}}, {Name: "Grep", Input: map[string]any{"pattern": "secret|ship", "path": "/memories"}}},
	}), env)

	got := p.runOK(t, "acme", "ada", "remember")
	if env != nil {
		wantIn(t, "corral dev's banner", p.log.String(), "memories in PostgreSQL")
	}
	wantIn(t, "ada's writes", got, "Wrote 30 bytes to /memories/notes.md", "Wrote 18 bytes to /memories/private/todo.md")

	got = p.runOK(t, "acme", "bob", "recall")
	wantIn(t, "bob's recall", got, "deploys go out with make ship", "/memories/private/todo.md does not exist")
	wantNotIn(t, "bob's recall", got, "secret")

	got = p.runOK(t, "acme", "ada", "recall")
	wantIn(t, "ada's recall", got, "deploys go out with make ship", "ada's secret plan")

	got = p.runOK(t, "other", "ada", "recall")
	wantIn(t, "another tenant's recall", got, "/memories/notes.md does not exist")
	wantNotIn(t, "another tenant's recall", got, "make ship", "secret")

	got = p.runOK(t, "acme", "bob", "list")
	wantIn(t, "bob's listing", got, "/memories/notes.md", "/memories/notes.md:1:deploys go out with make ship")
	wantNotIn(t, "bob's listing", got, "todo.md", "secret")

	for _, tc := range []struct {
		args      []string
		want, not []string
	}{
		{[]string{"memories", "ls", "--tenant", "acme", "--user", "bob"}, []string{"/memories/notes.md"}, []string{"todo.md"}},
		{[]string{"memories", "ls", "--tenant", "acme", "--user", "ada"}, []string{"/memories/notes.md", "/memories/private/todo.md"}, nil},
		{[]string{"memories", "ls", "--tenant", "other", "--user", "ada"}, nil, []string{"notes.md", "todo.md"}},
		{[]string{"memories", "cat", "/memories/notes.md", "--tenant", "acme"}, []string{"make ship"}, nil},
	} {
		code, stdout, stderr := p.corral(t, tc.args...)
		if code != 0 {
			t.Errorf("corral %v exited %d: %s", tc.args, code, stderr)
		}
		wantIn(t, fmt.Sprint(tc.args), stdout, tc.want...)
		wantNotIn(t, fmt.Sprint(tc.args), stdout, tc.not...)
	}
	for _, args := range [][]string{
		{"memories", "cat", "/memories/private/todo.md", "--tenant", "acme", "--user", "bob"},
		{"memories", "cat", "/memories/notes.md", "--tenant", "other"},
		{"memories", "rm", "/memories/notes.md", "--tenant", "other"},
		{"memories", "rm", "/memories/private/todo.md", "--tenant", "acme", "--user", "bob"},
	} {
		if code, stdout, _ := p.corral(t, args...); code == 0 || strings.Contains(stdout, "plan") || strings.Contains(stdout, "ship") {
			t.Errorf("corral %v = %d, %q; want a failure showing nothing", args, code, stdout)
		}
	}
	if code, _, stderr := p.corral(t, "memories", "rm", "/memories/notes.md", "--tenant", "acme"); code != 0 {
		t.Fatalf("memories rm: %s", stderr)
	}
	got = p.runOK(t, "acme", "bob", "recall")
	wantIn(t, "recall after rm", got, "/memories/notes.md does not exist")
	if _, stdout, _ := p.corral(t, "memories", "cat", "/memories/private/todo.md", "--tenant", "acme", "--user", "ada"); stdout != "ada's secret plan\n" {
		t.Errorf("ada's private memory after another rm = %q", stdout)
	}
}

// A write to a memory this session has not read, or that changed since it
// read it, is refused with a message to read it again; after reading, it
// goes through. A new file needs no read.
func TestMemoryWritesNeedAFreshRead(t *testing.T) {
	p := startDev(t, byPrompt(map[string][]modeltest.Call{
		"create": {write("/memories/team.md", "v1\n")},
		"blind":  {write("/memories/team.md", "blind\n"), read("/memories/team.md"), write("/memories/team.md", "v2\n")},
		"edit":   {read("/memories/team.md"), {Name: "Edit", Input: map[string]any{"file_path": "/memories/team.md", "old_string": "v2", "new_string": "v3"}}},
	}), nil)
	p.runOK(t, "acme", "ada", "create")
	got := p.runOK(t, "acme", "bob", "blind")
	wantIn(t, "blind write", got, "already exists and this session has not read it: Read it first", "Wrote 3 bytes to /memories/team.md")
	got = p.runOK(t, "acme", "ada", "edit")
	wantIn(t, "edit", got, "Edited /memories/team.md")
	if _, stdout, _ := p.corral(t, "memories", "cat", "/memories/team.md", "--tenant", "acme"); stdout != "v3\n" {
		t.Errorf("team.md = %q, want %q", stdout, "v3\n")
	}
	code, stdout, _ := p.corral(t, "memories", "ls", "/memories/team.md", "--tenant", "acme")
	if code != 0 || !strings.Contains(stdout, "ada") {
		t.Errorf("ls = %d %q, want the file last changed by ada", code, stdout)
	}
}

func writeTemp(t testing.TB, content string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(f, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// A skill pushed with the CLI is listed in the next session's system
// prompt and readable at /skills in its sandbox, read-only; other tenants
// see none of it.
func TestSkillsReachPromptAndSandbox(t *testing.T) {
	p := startDev(t, byPrompt(map[string][]modeltest.Call{
		"use": {
			{Name: "Bash", Input: map[string]any{"command": "cat /skills/deploy/SKILL.md; cat /skills/deploy/scripts/ship.sh"}},
			{Name: "Bash", Input: map[string]any{"command": "echo hacked > /skills/deploy/SKILL.md"}},
			read("/skills/deploy/SKILL.md"),
		},
	}), nil)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "scripts"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte("---\nname: deploy\ndescription: How we ship services to production\n---\nRun scripts/ship.sh.\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "scripts", "ship.sh"), []byte("echo shipping\n"), 0o644)
	code, stdout, stderr := p.corral(t, "skills", "push", dir, "--tenant", "acme")
	if code != 0 {
		t.Fatalf("skills push exited %d: %s", code, stderr)
	}
	wantIn(t, "push", stdout, "pushed skill deploy (2 files)")
	_, stdout, _ = p.corral(t, "skills", "ls", "--tenant", "acme")
	wantIn(t, "skills ls", stdout, "/skills/deploy/SKILL.md", "/skills/deploy/scripts/ship.sh")

	before := len(p.model.Requests())
	got := p.runOK(t, "acme", "ada", "use")
	wantIn(t, "the session", got, "name: deploy", "echo shipping", "Read-only file system",
		"use the Write and Edit tools", "Run scripts/ship.sh.")
	reqs := p.model.Requests()[before:]
	wantIn(t, "system prompt", reqs[0].System, "deploy: How we ship services to production (/skills/deploy/SKILL.md)")

	before = len(p.model.Requests())
	got = p.runOK(t, "other", "ada", "use")
	wantNotIn(t, "another tenant's session", got, "name: deploy", "echo shipping")
	if _, stdout, _ := p.corral(t, "skills", "ls", "--tenant", "other"); strings.Contains(stdout, "deploy") {
		t.Errorf("another tenant's skills ls shows acme's skill:\n%s", stdout)
	}
	wantNotIn(t, "another tenant's system prompt", p.model.Requests()[before].System, "deploy")

	// A SKILL.md without front matter is refused, and nothing is written.
	bad := t.TempDir()
	os.WriteFile(filepath.Join(bad, "SKILL.md"), []byte("no front matter\n"), 0o644)
	if code, _, stderr := p.corral(t, "skills", "push", bad, "--tenant", "acme"); code == 0 || !strings.Contains(stderr, "front matter") {
		t.Errorf("push of a bad skill = %d, %q; want a failure about front matter", code, stderr)
	}
	if code, stdout, stderr := p.corral(t, "skills", "rm", "deploy", "--tenant", "acme"); code != 0 || !strings.Contains(stdout, "2 files") {
		t.Errorf("skills rm = %d %q %s", code, stdout, stderr)
	}
	before = len(p.model.Requests())
	p.runOK(t, "acme", "ada", "use")
	wantNotIn(t, "system prompt after rm", p.model.Requests()[before].System, "deploy")
}
