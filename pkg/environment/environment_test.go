package environment_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"corral.dev/pkg/environment"
)

func valid() environment.Spec {
	return environment.Spec{
		Name:     "py-tools",
		Egress:   environment.Egress{Presets: []string{"pypi"}, Hosts: []string{"files.example.com", "*.example.org"}},
		Packages: environment.Packages{Pip: []string{"requests==2.32.0"}, NPM: []string{"left-pad@1.3.0"}, Go: []string{"golang.org/x/tools/cmd/stringer@v0.30.0"}},
		Setup:    "echo done\n",
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		change func(s *environment.Spec)
		want   string // in the error; "" for valid
	}{
		{"valid", func(*environment.Spec) {}, ""},
		{"the least", func(s *environment.Spec) { *s = environment.Spec{Name: "a"} }, ""},
		{"pip specifiers", func(s *environment.Spec) {
			s.Packages.Pip = []string{"rich[jupyter]>=13,<14", "numpy", "a.b-c_d~=1.0", "x!=2.*"}
		}, ""},
		{"npm scoped and ranges", func(s *environment.Spec) {
			s.Packages.NPM = []string{"@types/node@^20.1.0", "typescript", "lodash@latest", "x@>=1.2"}
		}, ""},
		{"go module with capitals", func(s *environment.Spec) { s.Packages.Go = []string{"github.com/BurntSushi/toml/cmd/tomlv@latest"} }, ""},
		{"no name", func(s *environment.Spec) { s.Name = "" }, `name ""`},
		{"name with a dot", func(s *environment.Spec) { s.Name = "py.tools" }, `name "py.tools"`},
		{"name capitalised", func(s *environment.Spec) { s.Name = "Py" }, `name "Py"`},
		{"unknown preset", func(s *environment.Spec) { s.Egress.Presets = []string{"cpan"} }, `egress.presets: no preset "cpan": want one of crates, debian, github, go, npm, pypi`},
		{"host with a port", func(s *environment.Spec) { s.Egress.Hosts = []string{"files.example.com:8443"} }, `egress.hosts: "files.example.com:8443"`},
		{"host without a dot", func(s *environment.Spec) { s.Egress.Hosts = []string{"localhost"} }, `egress.hosts: "localhost"`},
		{"any host", func(s *environment.Spec) { s.Egress.Hosts = []string{"*"} }, `egress.hosts: "*"`},
		{"an address", func(s *environment.Spec) { s.Egress.Hosts = []string{"10.0.0.1"} }, `egress.hosts: "10.0.0.1"`},
		{"host capitalised", func(s *environment.Spec) { s.Egress.Hosts = []string{"Files.example.com"} }, `egress.hosts: "Files.example.com"`},
		{"pip command", func(s *environment.Spec) { s.Packages.Pip = []string{"requests; rm -rf /"} }, `packages.pip[0] "requests; rm -rf /"`},
		{"pip option", func(s *environment.Spec) { s.Packages.Pip = []string{"--index-url=https://evil.test"} }, `packages.pip[0]`},
		{"pip url", func(s *environment.Spec) { s.Packages.Pip = []string{"pkg@https://evil.test/pkg.whl"} }, `packages.pip[0]`},
		{"pip space", func(s *environment.Spec) { s.Packages.Pip = []string{"requests >= 2"} }, `packages.pip[0]`},
		{"pip substitution", func(s *environment.Spec) { s.Packages.Pip = []string{"$(id)"} }, `packages.pip[0]`},
		{"npm quote", func(s *environment.Spec) { s.Packages.NPM = []string{"left-pad'@1"} }, `packages.npm[0]`},
		{"npm git url", func(s *environment.Spec) { s.Packages.NPM = []string{"git+https://evil.test/x.git"} }, `packages.npm[0]`},
		{"npm pipe", func(s *environment.Spec) { s.Packages.NPM = []string{"a@1||2"} }, `packages.npm[0]`},
		{"go without a version", func(s *environment.Spec) { s.Packages.Go = []string{"golang.org/x/tools/cmd/stringer"} }, `packages.go[0]`},
		{"go dot dot", func(s *environment.Spec) { s.Packages.Go = []string{"golang.org/x/../y@v1.0.0"} }, `packages.go[0]`},
		{"go backquote", func(s *environment.Spec) { s.Packages.Go = []string{"golang.org/x/`id`@v1"} }, `packages.go[0]`},
		{"apt", func(s *environment.Spec) { s.Packages.Apt = []string{"curl"} }, "packages.apt: refused: the sandbox's root is the host's, read-only"},
		{"setup too long", func(s *environment.Spec) { s.Setup = strings.Repeat("x", environment.MaxSetup+1) }, "setup: at most"},
		{"too many packages", func(s *environment.Spec) { s.Packages.Pip = make([]string, environment.MaxList+1) }, "packages.pip: 101 entries"},
		{"several problems", func(s *environment.Spec) { s.Name = ""; s.Packages.Apt = []string{"curl"} }, "or digit; packages.apt: refused"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := valid()
			tc.change(&s)
			err := s.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate: %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate: %v, want an error with %q", err, tc.want)
			case err != nil && !errors.Is(err, environment.ErrInvalid):
				t.Errorf("Validate: %v does not wrap ErrInvalid", err)
			}
		})
	}
}

// The version changes with what builds the layer or allows egress, and
// with nothing else.
func TestVersion(t *testing.T) {
	t.Parallel()
	base := valid()
	v := base.Version()
	if len(v) != 64 || strings.Trim(v, "0123456789abcdef") != "" {
		t.Fatalf("version %q: want 64 hex digits", v)
	}
	tests := []struct {
		name    string
		change  func(s *environment.Spec)
		changes bool
	}{
		{"nothing", func(*environment.Spec) {}, false},
		{"name", func(s *environment.Spec) { s.Name = "other" }, false},
		{"description", func(s *environment.Spec) { s.Description = "for the data team" }, false},
		{"presets reordered and repeated", func(s *environment.Spec) { s.Egress.Presets = []string{"pypi", "pypi"} }, false},
		{"hosts reordered", func(s *environment.Spec) { s.Egress.Hosts = []string{"*.example.org", "files.example.com"} }, false},
		{"a preset", func(s *environment.Spec) { s.Egress.Presets = append(s.Egress.Presets, "npm") }, true},
		{"no presets", func(s *environment.Spec) { s.Egress.Presets = nil }, true},
		{"a host", func(s *environment.Spec) { s.Egress.Hosts = []string{"files.example.com"} }, true},
		{"a host moved to presets", func(s *environment.Spec) { s.Egress.Hosts = append(s.Egress.Hosts, "pypi") }, true},
		{"a pip version", func(s *environment.Spec) { s.Packages.Pip = []string{"requests==2.32.1"} }, true},
		{"a package moved between tools", func(s *environment.Spec) {
			s.Packages.Pip, s.Packages.NPM = s.Packages.NPM, s.Packages.Pip
		}, true},
		{"packages reordered", func(s *environment.Spec) { s.Packages.Pip = []string{"b", "a"} }, true},
		{"setup", func(s *environment.Spec) { s.Setup = "echo done \n" }, true},
	}
	seen := map[string]string{}
	for _, tc := range tests {
		s := valid()
		tc.change(&s)
		got := s.Version()
		if (got != v) != tc.changes {
			t.Errorf("%s: version %s, base %s: changed = %v, want %v", tc.name, got, v, got != v, tc.changes)
		}
		if other, ok := seen[got]; ok && tc.changes && got != v {
			t.Errorf("%s: the same version as %s", tc.name, other)
		}
		seen[got] = tc.name
	}
	a, b := environment.Spec{Packages: environment.Packages{Pip: []string{"ab"}}}, environment.Spec{Packages: environment.Packages{Pip: []string{"a", "b"}}}
	if a.Version() == b.Version() {
		t.Error("one package and two packages spelt with its letters have one version")
	}
}

// The script installs every package quoted, in the layer, and a value
// the shell would expand is taken as it is written. It runs in sh here,
// with stand-ins for the tools that record their arguments.
func TestScript(t *testing.T) {
	t.Parallel()
	s := environment.Spec{Name: "t",
		Packages: environment.Packages{
			Pip: []string{"requests==2.32.0", "rich[jupyter]>=13,<14"},
			NPM: []string{"@types/node@^20.1.0"},
			Go:  []string{"golang.org/x/tools/cmd/stringer@v0.30.0", "example.com/b@latest"},
		},
		Setup: "echo setup ran \"$PWD\" >> \"$LOG\"",
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	script := s.Script()
	if !strings.HasPrefix(script, "set -eu\n") {
		t.Errorf("script does not start with set -eu:\n%s", script)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	// Each stand-in logs its name, GOBIN and each argument on a line.
	for _, tool := range []string{"python3", "npm", "go", "mkdir"} {
		stub := "#!/bin/sh\n{ printf '%s GOBIN=%s\\n' " + tool + " \"${GOBIN:-}\"; for a in \"$@\"; do printf '  [%s]\\n' \"$a\"; done; } >> \"$LOG\"\n"
		if err := os.WriteFile(filepath.Join(bin, tool), []byte(stub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	log := filepath.Join(dir, "log")
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin", "LOG=" + log}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("script: %v: %s\n%s", err, out, script)
	}
	got, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	want := `mkdir GOBIN=
  [-p]
  [/opt/env/bin]
python3 GOBIN=
  [-m]
  [pip]
  [install]
  [--no-input]
  [--disable-pip-version-check]
  [--no-warn-script-location]
  [--target]
  [/opt/env/python]
  [requests==2.32.0]
  [rich[jupyter]>=13,<14]
npm GOBIN=
  [install]
  [--no-audit]
  [--no-fund]
  [--no-update-notifier]
  [--prefix]
  [/opt/env/node]
  [@types/node@^20.1.0]
go GOBIN=/opt/env/bin
  [install]
  [golang.org/x/tools/cmd/stringer@v0.30.0]
go GOBIN=/opt/env/bin
  [install]
  [example.com/b@latest]
setup ran ` + dir + "\n"
	if string(got) != want {
		t.Errorf("the script ran\n%s\nwant\n%s\nscript:\n%s", got, want, script)
	}
	// No file named by a package's characters was made: ">=13" is no
	// redirection.
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("the script left %d entries in its directory, want bin and log", len(entries))
	}
}

// A failing step stops the script (set -e), and so does an unset
// variable (set -u).
func TestScriptStopsOnError(t *testing.T) {
	t.Parallel()
	for _, setup := range []string{"false\necho after", "echo \"$UNSET\"\necho after"} {
		s := environment.Spec{Name: "t", Setup: setup}
		out, err := exec.Command("/bin/sh", "-c", strings.ReplaceAll(s.Script(), "mkdir -p '/opt/env/bin'\n", "")).CombinedOutput()
		if err == nil || strings.Contains(string(out), "after") {
			t.Errorf("setup %q: %v, %q; want it to stop", setup, err, out)
		}
	}
}

func TestSessionEnv(t *testing.T) {
	t.Parallel()
	want := "/opt/env/bin:/opt/env/python/bin:/opt/env/node/node_modules/.bin"
	if got := strings.Join(environment.Path(), ":"); got != want {
		t.Errorf("Path = %s, want %s", got, want)
	}
	env := map[string]string{}
	for _, kv := range environment.Env() {
		env[kv[0]] = kv[1]
	}
	if env["PYTHONPATH"] != "/opt/env/python" || env["NODE_PATH"] != "/opt/env/node/node_modules" {
		t.Errorf("Env = %v", env)
	}
}
