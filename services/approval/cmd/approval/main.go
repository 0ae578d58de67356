// Command approval keeps the calls Corral's policy holds for a person's
// approval, serves the reviewers' web page and signs their decisions.
//
// It is configured from the environment: CORRAL_NATS_URL,
// CORRAL_APPROVAL_SIGNING_KEY (or _FILE), CORRAL_APPROVAL_LISTEN,
// CORRAL_REVIEWER_TOKENS, CORRAL_REVIEWER_HEADER, CORRAL_APPROVAL_TIMEOUT,
// CORRAL_LOG_LEVEL.
package main

import (
	"corral.dev/pkg/process"
	"corral.dev/services/approval"
)

func main() {
	process.Main("approval", approval.LoadConfig, approval.Start)
}
