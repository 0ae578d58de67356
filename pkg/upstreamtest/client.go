package upstreamtest

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// systemPython is Debian's Python, which has pip; a python3 earlier in PATH
// (pyenv's, say) may not.
const systemPython = "/usr/bin/python3"

// LookPath returns the path of the program file, as [exec.LookPath] finds
// it. When it is missing the test is skipped, or failed when the
// environment has CI=true, since CI must run every client.
func LookPath(t testing.TB, file string) string {
	t.Helper()
	path, err := exec.LookPath(file)
	if err != nil {
		missing(t, file, err)
	}
	return path
}

// Pip returns the command that runs Debian's pip, /usr/bin/python3 -m pip,
// to which a test appends pip's arguments. When it cannot run the test is
// skipped, or failed when CI=true.
func Pip(t testing.TB) []string {
	t.Helper()
	cmd := []string{systemPython, "-m", "pip"}
	out, err := exec.Command(cmd[0], append(cmd[1:], "--version")...).CombinedOutput()
	if err != nil {
		missing(t, "/usr/bin/python3 -m pip", fmt.Errorf("%w: %s", err, out))
	}
	return cmd
}

// missing skips t, or fails it under CI=true, because client cannot run.
func missing(t testing.TB, client string, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is needed under CI=true: %v", client, err)
	}
	t.Skipf("skipping: %s is not available: %v", client, err)
}
