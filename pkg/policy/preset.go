package policy

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

// presetPorts are the ports a preset's hosts are reached on: the web's.
// A preset allows HTTP(S) to a registry, not, say, SSH to github.com:22,
// which egress could only tunnel blind.
var presetPorts = [...]int{80, 443}

// Preset is a named set of hosts that an egress rule can name instead of
// spelling out the hosts of a package registry or service.
type Preset struct {
	Name string
	// Hosts are exact ("pypi.org") or a wildcard ("*.githubusercontent.com"),
	// which matches any host under the suffix but not the suffix itself.
	Hosts []string
}

// Presets returns every preset, sorted by name. The slices are the
// caller's.
func Presets() []Preset {
	out := make([]Preset, 0, len(presets))
	for _, name := range presetNames() {
		out = append(out, Preset{Name: name, Hosts: slices.Clone(presets[name])})
	}
	return out
}

// presetNames returns the presets' names, sorted.
func presetNames() []string { return slices.Sorted(maps.Keys(presets)) }

// hostSet is the hosts of one rule's presets, for matching a request.
type hostSet struct {
	exact    map[string]struct{}
	suffixes []string // ".githubusercontent.com"
}

// newHostSet returns the hosts of the named presets, or the first name
// that is no preset's as unknown.
func newHostSet(names []string) (hs hostSet, unknown string) {
	hs.exact = make(map[string]struct{})
	for _, name := range names {
		hosts, ok := presets[name]
		if !ok {
			return hostSet{}, name
		}
		for _, h := range hosts {
			if suffix, ok := strings.CutPrefix(h, "*"); ok {
				hs.suffixes = append(hs.suffixes, suffix)
			} else {
				hs.exact[h] = struct{}{}
			}
		}
	}
	return hs, ""
}

// match reports whether host (lowercase, without a trailing dot) on port
// is one of the set's.
func (hs hostSet) match(host string, port int) bool {
	if !slices.Contains(presetPorts[:], port) {
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
