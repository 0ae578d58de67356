package main

import (
	"strings"
	"testing"
	"time"

	"corral.dev/pkg/event"
	"corral.dev/pkg/upstreamtest"
)

// An environment whose packages come from a registry: the first session of
// it runs its setup (pip installing from a local PyPI through egress)
// before the model's first turn, the second runs none and starts at once,
// and the package imports in both, from the read-only layer at /opt/env.
// The tenant's default environment is what a request naming none gets.
func TestEnvironmentIsSetUpOnceForItsSessions(t *testing.T) {
	up := newUpstreams(t)
	pypi := upstreamtest.PyPI(t, up.ca, "pypi.org", upstreamtest.Package{Name: "corral-hello", Version: "1.0.0", Content: "GREETING = 'hi from the registry'\n"})
	up.add(pypi)
	p := startDev(t, byLastPromptFunc(func(prompt string) (string, bool) {
		return `python3 -c 'import corral_hello; print(corral_hello.GREETING)'; touch /opt/env/x 2>&1 | tail -1`, strings.HasSuffix(prompt, "use the package")
	}), up.env(t, noEgressPolicy))
	spec := "name: py\negress:\n  presets: [pypi]\npackages:\n  pip: [corral-hello==1.0.0]\nsetup: |\n  echo set up > /opt/env/marker\n"
	wantIn(t, "create", p.corralOK(t, "environments", "create", writeTemp(t, spec), "--default", "--tenant", "acme"), "py")

	type run struct {
		took    time.Duration
		prepare *event.ToolCompleted
		out     string
	}
	session := func() run {
		t.Helper()
		start := time.Now()
		code, stdout, stderr := p.corral(t, "run", "--tenant", "acme", "--user", "ada", "use the package")
		r := run{took: time.Since(start), out: stdout}
		if code != 0 {
			t.Fatalf("corral run exited %d:\n%s", code, stderr)
		}
		for _, ev := range p.events(t, sessionOf(t, stderr)) {
			if c, ok := ev.(*event.ToolCompleted); ok && c.Name == event.PrepareTool {
				r.prepare = c
			}
		}
		return r
	}
	first, second := session(), session()
	for i, r := range []run{first, second} {
		wantIn(t, "a session's answer", r.out, "hi from the registry", "Read-only file system")
		if i == 1 && r.prepare != nil {
			t.Errorf("the second session was prepared too: %s", r.prepare.Output)
		}
	}
	switch {
	case first.prepare == nil || first.prepare.IsError || first.prepare.Prepared == nil:
		t.Fatalf("the first session's environment was not set up: %+v", first.prepare)
	case first.prepare.Prepared.SetupMS <= 0:
		t.Errorf("the first session's setup took %d ms", first.prepare.Prepared.SetupMS)
	case second.took >= first.took:
		t.Errorf("the second session took %v, the first (which set the environment up) %v", second.took, first.took)
	}
	wheels := 0
	for _, r := range pypi.Requests() {
		if strings.Contains(r, ".whl") {
			wheels++
		}
	}
	if wheels != 1 {
		t.Errorf("the registry served %d wheels, want 1 (the setup ran once): %q", wheels, pypi.Requests())
	}
	wantIn(t, "ls", p.corralOK(t, "environments", "ls", "--tenant", "acme"), "py", "yes", "*")
}
