// Command auth answers the NATS server's auth callout: it signs clients in
// with the credentials of the credentials bucket, and creates the
// consumers clients ask for, within bounds.
//
// It is configured from the environment: CORRAL_NATS_URL,
// CORRAL_NATS_USER, CORRAL_NATS_PASSWORD, CORRAL_AUTH_ISSUER_SEED,
// CORRAL_AUTH_TTL, CORRAL_AUTH_ACCOUNT, CORRAL_AUTH_MAX_CONSUMERS,
// CORRAL_AUTH_CONSUMER_IDLE, CORRAL_METRICS_LISTEN, CORRAL_LOG_LEVEL,
// CORRAL_LOG_FORMAT.
package main

import (
	"corral.dev/pkg/process"
	"corral.dev/services/auth"
)

func main() {
	process.Main("auth", auth.LoadConfig, auth.Start)
}
