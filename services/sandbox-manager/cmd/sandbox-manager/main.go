// Command sandbox-manager runs tool calls in bubblewrap sandboxes for Corral.
//
// It is configured from the environment: CORRAL_NATS_URL, CORRAL_DATA_DIR, CORRAL_BWRAP,
// CORRAL_SANDBOX_CONCURRENCY, CORRAL_SANDBOX_TIMEOUT, CORRAL_SANDBOX_FILE_TIMEOUT, CORRAL_CALL_PUBLIC_KEY,
// CORRAL_LOG_LEVEL.
package main

import (
	"corral.dev/pkg/process"
	sandboxmanager "corral.dev/services/sandbox-manager"
)

func main() {
	sandboxmanager.RunExecutorIfRequested()
	process.Main("sandbox-manager", sandboxmanager.LoadConfig, sandboxmanager.Start)
}
