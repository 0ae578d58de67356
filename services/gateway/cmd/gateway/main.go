// Command gateway keeps Corral's session index and serves the Managed
// Agents API over HTTP.
//
// It is configured from the environment: CORRAL_NATS_URL,
// CORRAL_NATS_USER and CORRAL_NATS_PASSWORD (the gateway's own user),
// CORRAL_GATEWAY_LISTEN (HOST:PORT of the API; empty serves none),
// CORRAL_GATEWAY_KEY_IDLE, CORRAL_GATEWAY_MAX_KEYS, CORRAL_POLICY_FILE (the
// prices of the index's costs), CORRAL_WEBHOOK_ALLOW_PRIVATE,
// CORRAL_WEBHOOK_TIMEOUT, CORRAL_WEBHOOK_MAX_ATTEMPTS and
// CORRAL_WEBHOOK_RETRY_DELAY (how webhooks are delivered),
// CORRAL_GATEWAY_WEBHOOK_KEY or CORRAL_GATEWAY_WEBHOOK_KEY_FILE (required:
// 32 bytes in base64 that seal the webhooks' signing secrets in their
// bucket), CORRAL_METRICS_LISTEN, CORRAL_LOG_LEVEL.
package main

import (
	"corral.dev/pkg/process"
	"corral.dev/services/gateway"
)

func main() {
	process.Main("gateway", gateway.LoadConfig, gateway.Start)
}
