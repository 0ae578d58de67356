// Package version says which build of Corral is running, from what the Go
// toolchain recorded in the binary: the module's version when it was
// installed at one (go install corral.dev/services/corral@v1.2.3), else
// the commit it was built from, marked when the tree had changes.
package version

import (
	"runtime/debug"
	"sync"
)

// String returns the running build's version: "v1.2.3", "devel 1a2b3c4d5e6f"
// (with "-dirty" when built from a changed tree), or "devel" when the
// binary recorded neither.
var String = sync.OnceValue(func() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	return of(info)
})

// of reads info as [String] does.
func of(info *debug.BuildInfo) string {
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if rev == "" {
		return "devel"
	}
	return "devel " + rev[:min(12, len(rev))] + dirty
}
