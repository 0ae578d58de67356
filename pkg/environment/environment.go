// Package environment is what a tenant's named environment is: its
// definition ([Spec]: what its sessions may reach on the network, the
// packages it installs and a setup script), the checks a definition must
// pass, its [Spec.Version], the script a sandbox runs once to build its
// layer ([Spec.Script]), and what a session's sandbox with the layer gets
// ([Mount], [Env], [Path]).
//
// The setup runs once per version, in a sandbox whose /opt/env is
// writable; what it leaves there is the environment's layer, stored
// content-addressed and bound read-only at /opt/env in every session of
// that version. The sandbox's root is the host's, read-only: packages go
// to /opt/env (pip's --target, npm's --prefix, go install's GOBIN), never
// to the system, which is why apt is refused.
//
// The YAML file `corral environments create` takes is package envfile's:
// this package links no YAML parser, since the sandbox-manager, which
// links it, is also the executor every sandbox starts.
package environment

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"unicode/utf8"

	"corral.dev/pkg/preset"
)

// Spec is an environment's definition, as its YAML file and the
// environment API give it.
type Spec struct {
	// Name names the environment in its tenant, as a tenant is named.
	Name string `json:"name" yaml:"name"`
	// Description says what it is for; it changes nothing else.
	Description string `json:"description,omitempty" yaml:"description,omitempty"`
	// Egress is what its sessions and its setup may reach, besides what
	// the policy allows.
	Egress Egress `json:"egress,omitzero" yaml:"egress,omitempty"`
	// Packages are installed into the layer, before Setup runs.
	Packages Packages `json:"packages,omitzero" yaml:"packages,omitempty"`
	// Setup is a shell script run after the packages, with /opt/env
	// writable, under set -eu.
	Setup string `json:"setup,omitempty" yaml:"setup,omitempty"`
}

// Egress is the hosts an environment's sessions may reach that the
// policy's rules do not decide: a request no rule holds for (the
// policy's denial by default) to one of them is allowed; a rule that
// denies it, or holds it for a reviewer, still does. Hosts are reached
// on ports 80 and 443 only, as presets' are.
type Egress struct {
	// Presets name sets of hosts (pypi, npm, go, crates, debian, github;
	// see package preset).
	Presets []string `json:"presets,omitempty" yaml:"presets,omitempty"`
	// Hosts are lowercase host names, exact ("files.example.com") or a
	// wildcard for the names under a domain ("*.example.org", not
	// example.org itself).
	Hosts []string `json:"hosts,omitempty" yaml:"hosts,omitempty"`
}

// Packages are the packages a layer installs, each as its tool takes it
// on the command line: a pip requirement ("requests==2.32.0"), an npm
// package ("left-pad@1.3.0", "@scope/name@^1.2.0"), a Go package with its
// version ("golang.org/x/tools/cmd/stringer@v0.30.0").
type Packages struct {
	Pip []string `json:"pip,omitempty" yaml:"pip,omitempty"`
	NPM []string `json:"npm,omitempty" yaml:"npm,omitempty"`
	Go  []string `json:"go,omitempty" yaml:"go,omitempty"`
	// Apt is refused when it names anything: the sandbox's root is the
	// host's, read-only, and a layer is /opt/env alone.
	Apt []string `json:"apt,omitempty" yaml:"apt,omitempty"`
}

// Bounds of a [Spec].
const (
	// MaxSetup bounds the setup script's bytes.
	MaxSetup = 64 << 10
	// MaxDescription bounds the description's bytes.
	MaxDescription = 1000
	// MaxList bounds each list: presets, hosts, and each tool's packages.
	MaxList = 100
	// maxPackage bounds one package's spelling.
	maxPackage = 214
)

// ErrInvalid is wrapped by [Spec.Validate]'s errors.
var ErrInvalid = errors.New("invalid environment")

// CheckName reports whether name may name an environment: as a tenant
// name, 1 to 63 of a-z, 0-9, '-' and '_', starting with a letter or
// digit (it becomes a key token and a file name). The error wraps
// [ErrInvalid].
func CheckName(name string) error {
	if !patterns().name.MatchString(name) {
		return fmt.Errorf("%w: name %q: use 1-63 of a-z, 0-9, '-' and '_', starting with a letter or digit", ErrInvalid, name)
	}
	return nil
}

// Validate reports everything wrong with s, each part naming its field,
// in one error wrapping [ErrInvalid]; nil if s may be kept and built.
// Package names must be spelled as their tool takes them, with no shell
// metacharacter (no space, quote, ';', '|', '&', '$' or backquote): they
// go into a script, quoted, and never as options.
func (s *Spec) Validate() error {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	p := patterns()
	if !p.name.MatchString(s.Name) {
		bad("name %q: use 1-63 of a-z, 0-9, '-' and '_', starting with a letter or digit", s.Name)
	}
	if len(s.Description) > MaxDescription || !utf8.ValidString(s.Description) {
		bad("description: at most %d bytes of UTF-8", MaxDescription)
	}
	if len(s.Setup) > MaxSetup || !utf8.ValidString(s.Setup) || strings.ContainsRune(s.Setup, 0) {
		bad("setup: at most %d bytes of UTF-8 text", MaxSetup)
	}
	for _, pr := range s.Egress.Presets {
		if !preset.Known(pr) {
			bad("egress.presets: no preset %q: want one of %s", pr, strings.Join(preset.Names(), ", "))
		}
	}
	for _, h := range s.Egress.Hosts {
		if !p.host.MatchString(h) || len(h) > 253 || numericTLD(h) {
			bad("egress.hosts: %q is not a host name: want a lowercase name with a dot (files.example.com), or *. and one (*.example.org); no port, no address", h)
		}
	}
	lists := []struct {
		field string
		items []string
		re    *regexp.Regexp
		want  string
	}{
		{"egress.presets", s.Egress.Presets, nil, ""},
		{"egress.hosts", s.Egress.Hosts, nil, ""},
		{"packages.pip", s.Packages.Pip, p.pip, "a requirement as pip takes it, with no space: name, [extras], version specifiers (requests==2.32.0, rich[jupyter]>=13,<14)"},
		{"packages.npm", s.Packages.NPM, p.npm, "a package as npm takes it, with no space: name or @scope/name, and @ a version, range or tag (left-pad@1.3.0)"},
		{"packages.go", s.Packages.Go, p.goPkg, "a package path and its version, as go install takes it (golang.org/x/tools/cmd/stringer@v0.30.0)"},
	}
	for _, l := range lists {
		if len(l.items) > MaxList {
			bad("%s: %d entries, at most %d", l.field, len(l.items), MaxList)
		}
		if l.re == nil {
			continue
		}
		for i, item := range l.items {
			if len(item) > maxPackage || !l.re.MatchString(item) || strings.Contains(item, "..") && l.field == "packages.go" {
				bad("%s[%d] %q: want %s", l.field, i, item, l.want)
			}
		}
	}
	if len(s.Packages.Apt) > 0 {
		bad("packages.apt: refused: the sandbox's root is the host's, read-only, and an environment's layer is /opt/env alone, where apt does not install; have the host's image carry system packages, or install with pip, npm or go")
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%w %q: %s", ErrInvalid, s.Name, strings.Join(problems, "; "))
}

// numericTLD reports whether host's last label is all digits: an IPv4
// address, not a name.
func numericTLD(host string) bool {
	last := host[strings.LastIndexByte(host, '.')+1:]
	return strings.Trim(last, "0123456789") == ""
}

type regexps struct {
	name, host, pip, npm, goPkg *regexp.Regexp
}

// patterns are compiled on first use, not at init: every sandbox start
// runs the package inits of the sandbox-manager's binary, which links
// this package.
var patterns = sync.OnceValue(func() regexps {
	const (
		label = `[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?`
		pyID  = `[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?`
		pyVer = `(===|==|!=|<=|>=|~=|<|>)[A-Za-z0-9.*+!_-]+`
		npmID = `[a-z0-9][a-z0-9._-]*`
		goEl  = `[A-Za-z0-9_~+-][A-Za-z0-9._~+-]*`
	)
	return regexps{
		name:  regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`),
		host:  regexp.MustCompile(`^(\*\.)?(` + label + `\.)+` + label + `$`),
		pip:   regexp.MustCompile(`^` + pyID + `(\[` + pyID + `(,` + pyID + `)*\])?(` + pyVer + `(,` + pyVer + `)*)?$`),
		npm:   regexp.MustCompile(`^(@` + npmID + `/)?` + npmID + `(@[A-Za-z0-9.^~<>=*+_-]+)?$`),
		goPkg: regexp.MustCompile(`^[a-z0-9][a-z0-9-]*(\.[a-z0-9-]+)+(/` + goEl + `)*@[A-Za-z0-9._+-]+$`),
	}
})
