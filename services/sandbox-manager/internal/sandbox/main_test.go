package sandbox

import (
	"os"
	"testing"
)

// TestMain lets the test binary serve as the executor of the sandboxes its
// tests start: they run os.Executable(), which is this binary.
func TestMain(m *testing.M) {
	RunExecutorIfRequested()
	os.Exit(m.Run())
}
