package main

import (
	"os"
	"testing"

	sandboxmanager "corral.dev/services/sandbox-manager"
)

// TestMain lets the test binary serve as the executor of the sandboxes that
// the in-process sandbox-manager starts: they run os.Executable(), which is
// this binary.
func TestMain(m *testing.M) {
	sandboxmanager.RunExecutorIfRequested()
	os.Exit(m.Run())
}
