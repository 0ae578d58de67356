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
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/nats-io/nats.go"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/logger"
	"corral.dev/pkg/metrics"
	"corral.dev/pkg/sessionlog"
	slackbridge "corral.dev/services/slack-bridge"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "slack-bridge:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, getenv func(string) string) (err error) {
	log := logger.New(os.Stderr, getenv("CORRAL_LOG_LEVEL"), getenv("CORRAL_LOG_FORMAT"))
	cfg, err := slackbridge.LoadConfig(getenv)
	if err != nil {
		return err
	}
	// One connection per tenant, each signed in with its credential.
	conns, err := slackbridge.Connect(ctx, cfg, log)
	if err != nil {
		return err
	}
	var ncs []*nats.Conn
	for _, c := range conns {
		ncs = append(ncs, c.NC)
		defer func() { err = errors.Join(err, bus.Drain(c.NC, bus.DrainTimeout)) }()
	}
	svc, err := slackbridge.New(ctx, cfg, conns, log)
	if err != nil {
		return err
	}
	reg := metrics.NewRegistry()
	if err := sessionlog.Register(reg); err != nil {
		return err
	}
	return metrics.With(ctx, getenv("CORRAL_METRICS_LISTEN"), reg, metrics.Connected(ncs...), log, svc.Run)
}
