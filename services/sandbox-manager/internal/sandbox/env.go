package sandbox

import (
	"os"
	"slices"
	"strings"
)

// homeDir is the sandbox's HOME: a tmpfs of its own (see
// [Driver.sandboxArgs]), writable by whoever runs the commands, bounded
// like /tmp and living as long as the sandbox. What tools keep in HOME
// (git's config, pip's --user installs, npm's cache, Go's GOPATH, module
// cache and build cache) thus stays out of /workspace, and so out of its
// snapshots and its forks.
const homeDir = "/home/sandbox"

// toolchainDirs are the program directories of toolchains an image may
// install under /usr/local, in the order they go on PATH, ahead of the
// system's directories. Only those that exist on the host when the Driver
// starts go on PATH: the sandbox sees the host's /usr as it is.
//
// A sandbox with an environment's layer at /opt/env has the layer's
// directories (package environment's Path) ahead of them all (see
// [Driver.layerArgs]); one without has nothing of /opt/env on PATH.
var toolchainDirs = []string{
	"/usr/local/go/bin",    // Go, as the golang images and go.dev/dl install it
	"/usr/local/cargo/bin", // Rust, as the rust images install it (rustup's CARGO_HOME)
	"/usr/local/node/bin",  // Node.js, a distribution unpacked as /usr/local/node
}

// systemPath is the system's own program directories, after the toolchains.
var systemPath = []string{"/usr/local/bin", "/usr/bin", "/bin"}

// homePath is where user installs put programs in HOME (pip install
// --user, go install), last on PATH: what a command installs cannot
// shadow the system's programs.
var homePath = []string{homeDir + "/.local/bin", homeDir + "/go/bin"}

// sandboxEnv returns the whole environment of a sandboxed command, with
// toolchains (those of [toolchainDirs] present on the host; see
// [presentDirs]) first on PATH.
func sandboxEnv(toolchains []string) [][2]string {
	return [][2]string{
		{"PATH", strings.Join(slices.Concat(toolchains, systemPath, homePath), ":")},
		{"HOME", homeDir},
		{"LANG", "C.UTF-8"},
		{"TERM", "dumb"},
		{"TMPDIR", "/tmp"},
		{"USER", "sandbox"},
	}
}

// presentDirs returns those of dirs that are directories on the host, in
// their order.
func presentDirs(dirs []string) []string {
	var present []string
	for _, dir := range dirs {
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
			present = append(present, dir)
		}
	}
	return present
}
