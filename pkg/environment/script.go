package environment

import (
	"strings"
)

// Where a layer is, in the sandbox, and where its tools install.
const (
	// Mount is where a sandbox sees its environment's layer: writable
	// while the setup runs, read-only in its sessions.
	Mount = "/opt/env"
	// PythonDir holds what pip installs (--target), on PYTHONPATH.
	PythonDir = Mount + "/python"
	// NodeDir is npm's prefix: its node_modules is on NODE_PATH.
	NodeDir = Mount + "/node"
	// BinDir holds programs: go install's (GOBIN), and the setup's own.
	BinDir = Mount + "/bin"
)

// Path returns the directories of a layer that go first on PATH, in
// order: its own programs, pip's console scripts and npm's.
func Path() []string {
	return []string{BinDir, PythonDir + "/bin", NodeDir + "/node_modules/.bin"}
}

// Env returns the variables a sandbox with a layer gets beside PATH
// (see [Path]): Python and Node.js find the packages installed there.
func Env() [][2]string {
	return [][2]string{
		{"PYTHONPATH", PythonDir},
		{"NODE_PATH", NodeDir + "/node_modules"},
	}
}

// Script returns the shell script that builds s's layer, run once in a
// sandbox with [Mount] writable and the variables of [Env] and [Path]:
// under set -eu, it installs the pip packages into [PythonDir], the npm
// packages under [NodeDir] and the Go programs into [BinDir], each
// quoted, then runs s's setup as it is written. s must be valid (see
// [Spec.Validate]).
func (s *Spec) Script() string {
	var b strings.Builder
	b.WriteString("set -eu\n")
	b.WriteString("mkdir -p " + quote(BinDir) + "\n")
	if len(s.Packages.Pip) > 0 {
		b.WriteString("python3 -m pip install --no-input --disable-pip-version-check --no-warn-script-location --target " + quote(PythonDir))
		for _, p := range s.Packages.Pip {
			b.WriteString(" " + quote(p))
		}
		b.WriteString("\n")
	}
	if len(s.Packages.NPM) > 0 {
		b.WriteString("npm install --no-audit --no-fund --no-update-notifier --prefix " + quote(NodeDir))
		for _, p := range s.Packages.NPM {
			b.WriteString(" " + quote(p))
		}
		b.WriteString("\n")
	}
	// One at a time: go install takes several packages only of one
	// module at one version.
	for _, p := range s.Packages.Go {
		b.WriteString("GOBIN=" + quote(BinDir) + " go install " + quote(p) + "\n")
	}
	if s.Setup != "" {
		b.WriteString(s.Setup)
		if !strings.HasSuffix(s.Setup, "\n") {
			b.WriteString("\n")
		}
	}
	return b.String()
}

// quote quotes s as one word for sh.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
