// Package preset names the hosts of the package registries and services
// that egress rules (package policy) and environments (package
// environment) allow by name, and matches a request's host against a set
// of them.
//
// It stands apart from package policy, which compiles CEL, so that what
// only needs the presets' names (an environment's validation, in the
// sandbox-manager, whose binary every sandbox runs) links no CEL.
package preset

import (
	"maps"
	"slices"
	"strings"
)

// presets are the hosts each preset names: exact hosts, or "*.suffix" for
// any host under suffix (not suffix itself). Only what the tool needs with
// its default configuration: `go mod download` with the default GOPROXY
// reaches proxy.golang.org and sum.golang.org and nothing else.
var presets = map[string][]string{
	"pypi":   {"pypi.org", "files.pythonhosted.org"},
	"npm":    {"registry.npmjs.org", "registry.yarnpkg.com"},
	"go":     {"proxy.golang.org", "sum.golang.org"},
	"crates": {"crates.io", "index.crates.io", "static.crates.io"},
	"debian": {"deb.debian.org", "security.debian.org"},
	// Release downloads and raw files redirect to hosts under
	// githubusercontent.com (objects., raw., release-assets.), which
	// change over time; all of them serve what github.com already does.
	"github": {"github.com", "api.github.com", "codeload.github.com", "*.githubusercontent.com"},
}

// Ports are the ports a preset's hosts, and any [Hosts], are reached on:
// the web's. A preset allows HTTP(S) to a registry, not, say, SSH to
// github.com:22, which egress could only tunnel blind.
var Ports = [...]int{80, 443}

// Preset is a named set of hosts.
type Preset struct {
	Name string
	// Hosts are exact ("pypi.org") or a wildcard ("*.githubusercontent.com"),
	// which matches any host under the suffix but not the suffix itself.
	Hosts []string
}

// All returns every preset, sorted by name. The slices are the caller's.
func All() []Preset {
	out := make([]Preset, 0, len(presets))
	for _, name := range Names() {
		out = append(out, Preset{Name: name, Hosts: slices.Clone(presets[name])})
	}
	return out
}

// Names returns the presets' names, sorted.
func Names() []string { return slices.Sorted(maps.Keys(presets)) }

// Known reports whether name is a preset's.
func Known(name string) bool {
	_, ok := presets[name]
	return ok
}

// Hosts is a set of hosts a request's may match: exact, or under a
// wildcard's suffix. Its zero value matches nothing; it is safe for
// concurrent reads once built.
type Hosts struct {
	exact    map[string]struct{}
	suffixes []string // ".githubusercontent.com"
}

// Of returns the hosts of the named presets, or the first name that is
// no preset's as unknown.
func Of(names []string) (hs Hosts, unknown string) {
	for _, name := range names {
		hosts, ok := presets[name]
		if !ok {
			return Hosts{}, name
		}
		for _, h := range hosts {
			hs.Add(h)
		}
	}
	return hs, ""
}

// Add adds host to the set: exact ("files.example.com") or a wildcard
// ("*.example.org"), lowercase.
func (hs *Hosts) Add(host string) {
	if suffix, ok := strings.CutPrefix(host, "*"); ok {
		hs.suffixes = append(hs.suffixes, suffix)
		return
	}
	if hs.exact == nil {
		hs.exact = make(map[string]struct{})
	}
	hs.exact[host] = struct{}{}
}

// Empty reports whether the set matches no host.
func (hs Hosts) Empty() bool { return len(hs.exact) == 0 && len(hs.suffixes) == 0 }

// Match reports whether host (lowercase, without a trailing dot) on port
// is one of the set's, on one of [Ports].
func (hs Hosts) Match(host string, port int) bool {
	if !slices.Contains(Ports[:], port) {
		return false
	}
	if _, ok := hs.exact[host]; ok {
		return true
	}
	for _, s := range hs.suffixes {
		if len(host) > len(s) && strings.HasSuffix(host, s) {
			return true
		}
	}
	return false
}
