package environment

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
)

// layout names how a layer is built from a definition: the script
// [Spec.Script] writes and where it installs. A change to either must
// change it, so that every version names the layer it builds.
const layout = "corral-environment/1"

// canonical is what a version is the hash of: everything that changes
// the layer or what its sessions may reach, and nothing else (not the
// name, which two environments built alike may differ in, nor the
// description).
type canonical struct {
	Layout  string   `json:"layout"`
	Presets []string `json:"presets"`
	Hosts   []string `json:"hosts"`
	Pip     []string `json:"pip"`
	NPM     []string `json:"npm"`
	Go      []string `json:"go"`
	Setup   string   `json:"setup"`
	Apt     []string `json:"apt"`
}

// Version returns the version of s: the SHA-256, in hex, of a canonical
// encoding of what s builds and allows. Presets and hosts are sets, sorted
// and without repeats; packages keep their order, which the script keeps.
// Two definitions with the same version build the same layer.
func (s *Spec) Version() string {
	set := func(items []string) []string {
		out := slices.Clone(items)
		slices.Sort(out)
		return slices.Compact(out)
	}
	list := func(items []string) []string {
		if items == nil {
			return []string{}
		}
		return items
	}
	data, err := json.Marshal(canonical{
		Layout:  layout,
		Presets: list(set(s.Egress.Presets)),
		Hosts:   list(set(s.Egress.Hosts)),
		Pip:     list(s.Packages.Pip),
		NPM:     list(s.Packages.NPM),
		Go:      list(s.Packages.Go),
		Setup:   s.Setup,
		Apt:     list(s.Packages.Apt),
	})
	if err != nil {
		panic(err) // strings and slices of strings always encode
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}
