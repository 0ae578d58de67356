// Command memory keeps Corral's /memories and /skills.
//
// It is configured from the environment: CORRAL_NATS_URL, DATABASE_URL
// (PostgreSQL; without it, files are kept in a JetStream KV bucket),
// CORRAL_MEMORY_MAX_FILE_BYTES, CORRAL_MEMORY_MAX_FILES,
// CORRAL_MEMORY_CONCURRENCY, CORRAL_MEMORY_CALL_TIMEOUT, CORRAL_SHUTDOWN_GRACE, CORRAL_CALL_PUBLIC_KEY,
// CORRAL_LOG_LEVEL.
package main

import (
	"corral.dev/pkg/process"
	"corral.dev/services/memory"
)

func main() {
	process.Main("memory", memory.LoadConfig, memory.Start)
}
