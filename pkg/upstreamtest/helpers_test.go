package upstreamtest_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// clientTimeout bounds each client a test runs.
const clientTimeout = 2 * time.Minute

// clientEnv returns a minimal environment for a real client: the PATH, a
// HOME of its own, and extra, and nothing else of the test's environment
// (no proxy, no user configuration of git, pip or npm).
func clientEnv(t *testing.T, extra ...string) []string {
	t.Helper()
	return append([]string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + t.TempDir(),
		"LANG=C.UTF-8",
	}, extra...)
}

// run runs args in dir with env and returns its combined output and error.
func run(t *testing.T, dir string, env []string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), clientTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// mustRun is run, failing the test if args fail.
func mustRun(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	out, err := run(t, dir, env, args...)
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// readFile returns the contents of path, failing the test if it cannot.
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
