// Command egress is a sandbox node's egress proxy: the only way out of
// the sandboxes, with policy on every request and the tenants' vault
// credentials injected into the requests they are bound to.
//
// It is configured from the environment: CORRAL_NATS_URL,
// CORRAL_NATS_USER and CORRAL_NATS_PASSWORD, CORRAL_EGRESS_DIR,
// CORRAL_EGRESS_VAULT_KEY (or _FILE), CORRAL_APPROVAL_PUBLIC_KEY,
// CORRAL_POLICY_FILE, CORRAL_EGRESS_CA_CERT_FILE and _KEY_FILE,
// CORRAL_EGRESS_SYSTEM_CA, CORRAL_EGRESS_CONTROL_MODE,
// CORRAL_EGRESS_ALLOW_PRIVATE, CORRAL_LOG_LEVEL; for tests only,
// CORRAL_EGRESS_TEST_RESOLVE and CORRAL_EGRESS_TEST_UPSTREAM_CA.
package main

import (
	"corral.dev/pkg/process"
	"corral.dev/services/egress"
)

func main() {
	process.Main("egress", egress.LoadConfig, egress.Start)
}
