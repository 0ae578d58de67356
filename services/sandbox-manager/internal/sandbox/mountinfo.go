package sandbox

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/moby/sys/mountinfo"
)

// ShownPath returns what a sandbox's /proc/self/mountinfo shows as the
// source of its /workspace, for the session directory dir/<tenant>/<session>:
// the kernel shows a bind mount's source as its path from the root of its
// file system, whatever it is bound as. It is "/<tenant>/<session>" when
// dir is the root of a file system of its own, and otherwise names host
// directories above it. The sandbox's own tenant and session are shown
// as <tenant> and <session>.
func ShownPath(dir string) (string, error) {
	dir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	mounts, err := mountinfo.GetMounts(mountinfo.ParentsFilter(dir))
	if err != nil {
		return "", fmt.Errorf("read the mounts: %w", err)
	}
	// The mount dir lies in is the deepest of those above it.
	var in *mountinfo.Info
	for _, m := range mounts {
		if in == nil || len(m.Mountpoint) >= len(in.Mountpoint) {
			in = m
		}
	}
	if in == nil {
		return "", fmt.Errorf("no mount holds %s", dir)
	}
	rel, err := filepath.Rel(in.Mountpoint, dir)
	if err != nil {
		return "", err
	}
	shown := filepath.Join(in.Root, rel, "<tenant>", "<session>")
	return strings.TrimSuffix(shown, "/"), nil
}
