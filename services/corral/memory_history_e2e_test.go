package main

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"corral.dev/pkg/modeltest"
)

// corralOK runs the CLI and returns its output, failing the test if it
// fails.
func (p *platform) corralOK(t *testing.T, args ...string) string {
	t.Helper()
	code, stdout, stderr := p.corral(t, args...)
	if code != 0 {
		t.Fatalf("corral %s exited %d\n%s", strings.Join(args, " "), code, stderr)
	}
	return stdout
}

var logVersion = regexp.MustCompile(`(?m)^v(\d+)\s`)

// logVersions returns the versions corral memories log lists, oldest first.
func logVersions(out string) []string {
	var vs []string
	for _, m := range logVersion.FindAllStringSubmatch(out, -1) {
		vs = append(vs, m[1])
	}
	return vs
}

// corral memories log lists a file's versions, with size, writer and
// time; restore writes one back as the newest; a tenant's stored bytes,
// its history included, are bounded, and a write past the bound is refused
// with a clear message, to the CLI and to the model.
func TestMemoryHistory(t *testing.T) {
	forEachStore(t, testMemoryHistory)
}

func testMemoryHistory(t *testing.T, env map[string]string) {
	if env == nil {
		env = map[string]string{}
	}
	env["CORRAL_MEMORY_MAX_TENANT_BYTES"] = "1000"
	p := startDev(t, byPrompt(map[string][]modeltest.Call{
		"big":     {write("/memories/big.md", strings.Repeat("b", 700))},
		"another": {write("/memories/another.md", strings.Repeat("a", 700))},
	}), env)
	mem := func(user string, args ...string) []string {
		return append(append([]string{"memories"}, args...), "--tenant", "acme", "--user", user)
	}
	for i, who := range []string{"ada", "bob", "ada"} {
		p.corralOK(t, mem(who, "put", "/memories/notes.md", writeTemp(t, fmt.Sprintf("draft %d\n", i+1)))...)
	}
	out := p.corralOK(t, mem("ada", "log", "/memories/notes.md")...)
	vs := logVersions(out)
	if len(vs) != 3 {
		t.Fatalf("log lists %d versions, want 3:\n%s", len(vs), out)
	}
	wantIn(t, "log", out, "VERSION", "8 bytes", "bob", "ada")

	got := p.corralOK(t, mem("bob", "restore", "/memories/notes.md", vs[0])...)
	wantIn(t, "restore", got, "restored /memories/notes.md to version "+vs[0])
	if cat := p.corralOK(t, mem("ada", "cat", "/memories/notes.md")...); cat != "draft 1\n" {
		t.Errorf("after restore, notes.md = %q, want %q", cat, "draft 1\n")
	}
	out = p.corralOK(t, mem("ada", "log", "/memories/notes.md")...)
	if after := logVersions(out); len(after) != 4 || !strings.Contains(out[strings.LastIndex(out, "v"+after[3]):], "bob") {
		t.Errorf("log after restore, want 4 versions, the newest bob's:\n%s", out)
	}
	if code, _, stderr := p.corral(t, mem("ada", "restore", "/memories/notes.md", "999999")...); code == 0 || !strings.Contains(stderr, "no version 999999") {
		t.Errorf("restore of a version never made: exit %d, %s", code, stderr)
	}

	// Private memories are their user's, history too.
	p.corralOK(t, mem("ada", "put", "/memories/private/plan.md", writeTemp(t, "ada's plan\n"))...)
	if code, out, _ := p.corral(t, mem("bob", "log", "/memories/private/plan.md")...); code == 0 || strings.Contains(out, "bytes") {
		t.Errorf("bob's log of ada's private memory: exit %d\n%s", code, out)
	}
	if len(logVersions(p.corralOK(t, mem("ada", "log", "/memories/private/plan.md")...))) != 1 {
		t.Error("ada's log of her private memory lists no version")
	}

	// 33 bytes kept so far (history included); 1000 at most.
	code, _, stderr := p.corral(t, mem("ada", "put", "/memories/huge.md", writeTemp(t, strings.Repeat("h", 990)))...)
	if code == 0 || !strings.Contains(stderr, "memory storage full") || !strings.Contains(stderr, "may store at most 1000") {
		t.Errorf("a put past the tenant's bound: exit %d, %s", code, stderr)
	}
	answer := p.runOK(t, "acme", "ada", "big")
	wantIn(t, "the model's write", answer, "Wrote 700 bytes to /memories/big.md")
	answer = p.runOK(t, "acme", "bob", "another")
	wantIn(t, "a second write of 700 bytes", answer, "memory storage full", "remove files you no longer need")
	if cat := p.corralOK(t, mem("ada", "cat", "/memories/notes.md")...); cat != "draft 1\n" {
		t.Errorf("after the refused writes, notes.md = %q", cat)
	}
}
