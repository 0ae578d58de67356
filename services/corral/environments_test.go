package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
	"corral.dev/pkg/credentialtest"
	"corral.dev/pkg/environment/envfile"
	"corral.dev/pkg/environmentapi"
	"corral.dev/pkg/modeltest"
)

const pyTools = `name: py-tools
description: Python with the HTTP libraries
egress:
  presets: [pypi]
  hosts: [files.example.com, "*.example.org"]
packages:
  pip: [requests==2.32.0]
  apt: []
setup: |
  echo ready > /opt/env/ready
`

// writeFile writes content to a file of the test's and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// The environments' commands create (again, harmlessly), list, show,
// choose the default and remove a tenant's environments through the
// sandbox-managers' API, under the deployed permissions: a user's
// credential reads them, and may not change them.
func TestEnvironmentsCLI(t *testing.T) {
	p := startDev(t, byPrompt(map[string][]modeltest.Call{}), nil)
	acme := func(args ...string) []string { return append(args, "--tenant", "acme") }
	file := writeFile(t, "py-tools.yaml", pyTools)

	out := p.corralOK(t, acme("environments", "create", file, "--default")...)
	if !regexp.MustCompile(`^environment py-tools created: version [0-9a-f]{12}, not built yet: the first session in it runs its setup; the tenant's default\n$`).MatchString(out) {
		t.Errorf("create:\n%s", out)
	}
	version := regexp.MustCompile(`version ([0-9a-f]{12})`).FindStringSubmatch(out)[1]
	wantIn(t, "create again", p.corralOK(t, acme("environments", "create", file)...), "environment py-tools unchanged: version "+version)
	changed := writeFile(t, "py-tools.yaml", strings.Replace(pyTools, "echo ready", "echo set", 1))
	out = p.corralOK(t, acme("environments", "create", changed)...)
	if !strings.Contains(out, "environment py-tools changed: version ") || strings.Contains(out, version) {
		t.Errorf("create a changed definition:\n%s\nwant it changed, to a new version", out)
	}
	p.corralOK(t, acme("environments", "create", writeFile(t, "node.yaml", "name: node\npackages:\n  npm: [left-pad@1.3.0]\n"))...)

	ls := p.corralOK(t, acme("environments", "ls")...)
	if !regexp.MustCompile(`(?m)^NAME\s+VERSION\s+BUILT\s+DEFAULT\s+DESCRIPTION\n` +
		`node\s+[0-9a-f]{12}\s+no\s*\n` +
		`py-tools\s+[0-9a-f]{12}\s+no\s+\*\s+Python with the HTTP libraries\n$`).MatchString(ls) {
		t.Errorf("ls:\n%s", ls)
	}
	show := p.corralOK(t, acme("environments", "show", "py-tools")...)
	wantIn(t, "show", show, "name: py-tools\n", "presets:\n    - pypi\n", "'*.example.org'", "setup: |\n  echo set > /opt/env/ready\n",
		"# version ", "# not built yet", "# the tenant's default")
	// What show prints, create takes back, unchanged.
	wantIn(t, "create from show", p.corralOK(t, acme("environments", "create", writeFile(t, "shown.yaml", show))...), "environment py-tools unchanged")

	wantIn(t, "default", p.corralOK(t, acme("environments", "default", "node")...), "environment node is the tenant's default")
	if ls := p.corralOK(t, acme("environments")...); !regexp.MustCompile(`(?m)^node\s+[0-9a-f]{12}\s+no\s+\*\s*$`).MatchString(ls) {
		t.Errorf("ls after default node:\n%s", ls)
	}
	// Another tenant sees none of them.
	wantIn(t, "initech's", p.corralOK(t, "environments", "--tenant", "initech"), "No environments")

	// Mistakes, said clearly.
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no file", acme("environments", "create", filepath.Join(t.TempDir(), "missing.yaml")), 2, "missing.yaml: no such file"},
		{"broken yaml", acme("environments", "create", writeFile(t, "b.yaml", "name: x\n  setup: [\n")), 2, "b.yaml: yaml: line 2:"},
		{"unknown field", acme("environments", "create", writeFile(t, "u.yaml", "name: x\nimage: ubuntu\n")), 2, `u.yaml: yaml: line 2: unknown field "image"`},
		{"apt", acme("environments", "create", writeFile(t, "a.yaml", "name: x\npackages:\n  apt: [curl]\n")), 2, "packages.apt: refused: the sandbox's root is the host's, read-only"},
		{"show unknown", acme("environments", "show", "rust"), 1, `no such environment "rust" in tenant acme`},
		{"default unknown", acme("environments", "default", "rust"), 1, `no such environment "rust"`},
	} {
		code, _, stderr := p.corral(t, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%s: exit %d, %q; want exit %d with %q", tc.name, code, stderr, tc.code, tc.want)
		}
	}

	// The harness and egress read the bucket under their own
	// permissions: the environment a request names none of resolves to
	// the default, and a version replaced since is still found.
	first, err := envfile.Parse([]byte(pyTools))
	if err != nil {
		t.Fatal(err)
	}
	auth, err := os.ReadFile(filepath.Join(p.data, devAuthFile))
	if err != nil {
		t.Fatal(err)
	}
	var a devAuth
	if err := json.Unmarshal(auth, &a); err != nil {
		t.Fatal(err)
	}
	for _, user := range []string{credential.UserHarness, credential.UserEgress} {
		nc, err := nats.Connect(p.url, bus.SignIn(user, a.Passwords[user]))
		if err != nil {
			t.Fatal(err)
		}
		js, _ := jetstream.New(nc)
		ctx := t.Context()
		kv, err := js.KeyValue(ctx, bus.BucketEnvironments)
		if err != nil {
			t.Fatalf("%s: %v", user, err)
		}
		if name, _, _, err := environmentapi.Resolve(ctx, kv, "acme", ""); err != nil || name != "node" {
			t.Errorf("%s resolves the default: %q, %v", user, name, err)
		}
		if e, err := environmentapi.Lookup(ctx, kv, "acme", "py-tools", first.Version()); err != nil || e.Spec.Setup != first.Setup {
			t.Errorf("%s looks up the first version: %+v, %v", user, e, err)
		}
		nc.Close()
	}

	// A user's credential reads, and may not change.
	nc, err := p.connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	admin, _ := jetstream.New(nc)
	user, secret := credentialtest.Issue(t, admin, "acme", "ada", credential.RoleUser)
	getenv := p.getenv
	p.getenv = func(k string) string {
		switch k {
		case "CORRAL_NATS_USER":
			return user.ID
		case "CORRAL_NATS_PASSWORD":
			return secret
		case "CORRAL_USER":
			return "ada"
		}
		return getenv(k)
	}
	wantIn(t, "ls as a user", p.corralOK(t, acme("environments", "ls")...), "py-tools", "node")
	wantIn(t, "show as a user", p.corralOK(t, acme("environments", "show", "node")...), "name: node")
	for _, args := range [][]string{
		acme("environments", "create", file),
		acme("environments", "rm", "node"),
		acme("environments", "default", "py-tools"),
	} {
		code, _, stderr := p.corral(t, args...)
		if code != 1 || !strings.Contains(stderr, "environments takes a reviewer's or an operator's credential of tenant acme") {
			t.Errorf("%s as a user: exit %d, %q; want refused for want of a reviewer's credential", strings.Join(args, " "), code, stderr)
		}
	}
	p.getenv = getenv

	wantIn(t, "rm", p.corralOK(t, acme("environments", "rm", "node")...), "environment node removed; the tenant has no default environment now")
	wantIn(t, "rm py-tools", p.corralOK(t, acme("environments", "rm", "py-tools")...), "environment py-tools removed\n")
	wantIn(t, "ls after rm", p.corralOK(t, acme("environments")...), "No environments")
}
