package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"corral.dev/pkg/bus"
	slackbridge "corral.dev/services/slack-bridge"
)

func (e *env) setupCmd() *cobra.Command {
	var url string
	var replicas int
	cmd := &cobra.Command{
		Use:   "setup",
		Short: "Create or update Corral's streams and buckets (run once per version, as an administrator)",
		Long: `Creates the streams, KV buckets and object stores Corral uses, and updates
those whose settings differ. Every service does this at start when its NATS
user may; under deploy/nats.conf they may not, and an administrator
(CORRAL_NATS_USER=admin) runs this once per version instead.

On a NATS cluster, --replicas 3 keeps three copies of each, on three
servers, so that the platform rides through the loss of one; run it again
with another number to change it. Without it (and without
CORRAL_NATS_REPLICAS), new ones get one copy and existing ones keep theirs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := bus.ReplicasFromEnv(e.getenv)
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("replicas") {
				if replicas < 1 || replicas > bus.MaxReplicas {
					return fmt.Errorf("--replicas %d: want 1 to %d", replicas, bus.MaxReplicas)
				}
				opts = []bus.SetupOption{bus.Replicas(replicas)}
			}
			nc, js, err := e.connect(url)
			if err != nil {
				return err
			}
			defer nc.Close()
			if err := bus.Setup(cmd.Context(), js, opts...); err != nil {
				return err
			}
			// The Slack bridge's own bucket: under deploy/nats.conf its
			// user may not create it.
			if _, err := slackbridge.Setup(cmd.Context(), js); err != nil {
				return err
			}
			fmt.Fprintln(e.stdout, "streams and buckets are set up")
			return nil
		},
	}
	cmd.Flags().StringVar(&url, "nats", e.natsURL(), "NATS URL of the platform, or a cluster's URLs separated by commas (CORRAL_NATS_URL)")
	cmd.Flags().IntVar(&replicas, "replicas", 0, "copies of each stream and bucket, on as many servers of a NATS cluster (default: CORRAL_NATS_REPLICAS, else 1 for new ones and existing ones unchanged)")
	return cmd
}
