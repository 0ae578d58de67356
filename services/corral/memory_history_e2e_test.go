package main

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// corralOK runs the CLI and returns its output, failing the test if it
// fails.
func (p *platform) corralOK(t testing.TB, args ...string) string {
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
// time; restore writes one back as the newest and says so; a restore or a
// put the memory service refuses fails with its reason. (The memory
// service's own tests cover history, restore and the tenant's byte bound
// on both stores.)
func TestMemoryHistory(t *testing.T) {
	p := startDev(t, nil, map[string]string{"CORRAL_MEMORY_MAX_TENANT_BYTES": "1000"})
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
	// 32 bytes kept so far, history included; with the old versions
	// pruned, 995 more still do not fit in 1000.
	code, _, stderr := p.corral(t, mem("ada", "put", "/memories/huge.md", writeTemp(t, strings.Repeat("h", 995)))...)
	if code == 0 || !strings.Contains(stderr, "memory storage full") || !strings.Contains(stderr, "may store at most 1000") {
		t.Errorf("a put past the tenant's bound: exit %d, %s", code, stderr)
	}
}
