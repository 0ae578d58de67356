package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
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

// runOKCode runs a session as ada and returns what corral run does.
func (p *platform) runOKCode(t *testing.T, tenant, prompt string) (int, string, string) {
	t.Helper()
	return p.corral(t, "run", "--tenant", tenant, "--user", "ada", prompt)
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

// A tenant may hold only so many files; the write past the limit is
// refused and writes nothing.
func TestMemoryFileLimit(t *testing.T) {
	p := startDev(t, byPrompt(map[string][]modeltest.Call{
		"fill": {write("/memories/1.md", "a"), write("/memories/2.md", "b"), write("/memories/3.md", "c")},
	}), map[string]string{"CORRAL_MEMORY_MAX_FILES": "2"})
	got := p.runOK(t, "acme", "ada", "fill")
	wantIn(t, "fill", got, "Wrote 1 bytes to /memories/1.md", "Wrote 1 bytes to /memories/2.md", "too many files: tenant acme has 2 files")
	if code, _, _ := p.corral(t, "memories", "cat", "/memories/3.md", "--tenant", "acme"); code == 0 {
		t.Error("the file past the limit was written")
	}
	if code, _, _ := p.runOKCode(t, "other", "fill"); code != 0 {
		t.Error("another tenant's session failed")
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

// N sessions read one memory and then write it at once: exactly one write
// wins, the others are told to read it again, and the file is the
// winner's whole content.
func TestMemoryWriteRace(t *testing.T) {
	forEachStore(t, testMemoryWriteRace)
}

func testMemoryWriteRace(t *testing.T, env map[string]string) {
	const n = 6
	var mu sync.Mutex
	haveRead := map[string]bool{}
	content := func(i int) string { return strings.Repeat(fmt.Sprintf("writer %d\n", i), 200) }
	p := startDev(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
		prompt := c.Messages[0].Text
		var i int
		fmt.Sscanf(prompt, "race %d", &i)
		switch modeltest.Turns(c) {
		case 0:
			return modeltest.Turn{Calls: []modeltest.Call{read("/memories/shared.md")}}, nil
		case 1:
			// Hold every write back (the harness retries) until all
			// sessions have read the file, so that all expect one version.
			mu.Lock()
			haveRead[prompt] = true
			all := len(haveRead) == n
			mu.Unlock()
			if !all {
				return modeltest.Turn{}, errors.New("waiting for the other sessions to read")
			}
			return modeltest.Turn{Calls: []modeltest.Call{write("/memories/shared.md", content(i))}}, nil
		}
		return modeltest.Turn{Text: echoResults(resultsOf(c))}, nil
	}, env)
	code, _, stderr := p.corral(t, "memories", "put", "/memories/shared.md", filepath.Join(writeTemp(t, "base\n")), "--tenant", "acme")
	if code != 0 {
		t.Fatal(stderr)
	}
	answers := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { answers[i] = p.runOK(t, "acme", fmt.Sprint("user", i), fmt.Sprint("race ", i)) })
	}
	wg.Wait()
	winner := -1
	for i, a := range answers {
		switch {
		case strings.Contains(a, "Wrote") && winner >= 0:
			t.Errorf("sessions %d and %d both wrote:\n%s\n%s", winner, i, answers[winner], a)
		case strings.Contains(a, "Wrote"):
			winner = i
		case !strings.Contains(a, "has changed since this session last read it: Read it again"):
			t.Errorf("session %d neither won nor was told to re-read:\n%s", i, a)
		}
	}
	if winner < 0 {
		t.Fatal("no session wrote")
	}
	if _, stdout, _ := p.corral(t, "memories", "cat", "/memories/shared.md", "--tenant", "acme"); stdout != content(winner) {
		t.Errorf("shared.md is not session %d's whole content: %.60q", winner, stdout)
	}
}

// resultsOf returns every tool result of a conversation.
func resultsOf(c modeltest.Conversation) []string {
	var out []string
	for _, m := range c.Messages {
		for _, r := range m.Results {
			out = append(out, r.Content)
		}
	}
	return out
}

func writeTemp(t *testing.T, content string) string {
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

// Bad paths and content get clear errors and write nothing.
func TestMemoryBadInput(t *testing.T) {
	long := "/memories/" + strings.Repeat("a", 600)
	p := startDev(t, byPrompt(map[string][]modeltest.Call{
		"bad": {
			write("/memories/../etc/passwd", "x"),
			write("/memories//double.md", "x"),
			write(long, "x"),
			write("/memories/ctl\x01.md", "x"),
			write("/memories/bin.md", "a\x00b"),
			write("/memories/big.md", strings.Repeat("x", 300<<10)),
			write("/skills/loose.md", "x"),
			write("/skills/s/SKILL.md", "no front matter"),
			read("/memories"),
		},
	}), map[string]string{"CORRAL_POLICY_FILE": writeTemp(t, "# no rules: every call goes to the memory service\n")})
	code, got, stderr := p.corral(t, "run", "--tenant", "acme", "--user", "ada", "bad")
	if code != 0 {
		t.Fatalf("corral run exited %d: %s", code, stderr)
	}
	wantIn(t, "bad input", got, `has a ".." segment`, "empty segment (//)", "longer than 512 bytes", "control character",
		"text only", "may hold at most 262144", "a skill is a folder", "front matter", "/memories does not exist")
	code, stdout, _ := p.corral(t, "memories", "ls", "/", "--tenant", "acme", "--user", "ada")
	if code != 0 || strings.TrimSpace(stdout) != "" {
		t.Errorf("after refused writes, ls / = %d %q; want nothing", code, stdout)
	}
	evs := p.events(t, sessionOf(t, stderr))
	for _, r := range results(evs) {
		if !r.IsError {
			t.Errorf("%s call succeeded: %s", r.Name, r.Output)
		}
	}
}
