package policy

import (
	"corral.dev/pkg/preset"
)

// Preset is a named set of hosts that an egress rule can name instead of
// spelling out the hosts of a package registry or service (see package
// preset, which holds them).
type Preset = preset.Preset

// Presets returns every preset, sorted by name. The slices are the
// caller's.
func Presets() []Preset { return preset.All() }

// presetNames returns the presets' names, sorted.
func presetNames() []string { return preset.Names() }

// hostSet is the hosts of one rule's presets, for matching a request.
type hostSet = preset.Hosts

// newHostSet returns the hosts of the named presets, or the first name
// that is no preset's as unknown.
func newHostSet(names []string) (hs hostSet, unknown string) { return preset.Of(names) }
