// Command harness runs Corral's agent loop against a NATS server.
//
// It is configured from the environment: CORRAL_NATS_URL, CORRAL_MODEL,
// OPENAI_API_KEY, OPENAI_BASE_URL, ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL,
// CORRAL_MAX_TURNS, CORRAL_MAX_TOKENS, CORRAL_CALL_SIGNING_KEY (or _FILE),
// CORRAL_APPROVAL_PUBLIC_KEY, CORRAL_LOG_LEVEL.
package main

import (
	"corral.dev/pkg/process"
	"corral.dev/services/harness"
)

func main() {
	process.Main("harness", harness.LoadConfig, harness.Start)
}
