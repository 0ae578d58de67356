// Command slack-bridge connects a Slack app to Corral: mentions, direct
// messages and a slash command start and continue sessions, one per Slack
// thread; progress, approvals (with Approve and Deny buttons) and answers
// are posted into the thread.
//
// It is configured from the environment: CORRAL_NATS_URL,
// CORRAL_SLACK_SIGNING_SECRET, CORRAL_SLACK_BOT_TOKEN, CORRAL_SLACK_LISTEN,
// CORRAL_SLACK_API_URL, CORRAL_SLACK_TENANT, CORRAL_SLACK_TEAMS,
// CORRAL_SLACK_CREDENTIALS (or CORRAL_SLACK_CREDENTIALS_FILE),
// CORRAL_SLACK_REVIEWERS, CORRAL_SLACK_MODEL, CORRAL_METRICS_LISTEN,
// CORRAL_LOG_LEVEL. It signs in to NATS once for each tenant its
// workspaces belong to, with that tenant's credential.
package main

import (
	"corral.dev/pkg/process"
	slackbridge "corral.dev/services/slack-bridge"
)

func main() {
	process.Main("slack-bridge", slackbridge.LoadConfig, slackbridge.Start)
}
