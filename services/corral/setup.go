package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"corral.dev/pkg/bus"
	"corral.dev/services/gateway"
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
CORRAL_NATS_REPLICAS), new ones get one copy and existing ones keep theirs.
CORRAL_NATS_WORKSPACES_BYTES (default 10 GiB) and CORRAL_NATS_SKILLS_BYTES
(1 GiB) bound the object stores of workspace snapshots and skills.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := bus.SetupFromEnv(e.getenv)
			if err != nil {
				return err
			}
			n, _ := strconv.Atoi(e.getenv("CORRAL_NATS_REPLICAS")) // checked just above
			if cmd.Flags().Changed("replicas") {
				if replicas < 1 || replicas > bus.MaxReplicas {
					return fmt.Errorf("--replicas %d: want 1 to %d", replicas, bus.MaxReplicas)
				}
				n, opts = replicas, append(opts, bus.Replicas(replicas)) // the flag overrides the environment
			}
			nc, js, err := e.connect(url)
			if err != nil {
				return err
			}
			defer nc.Close()
			// Creating replicated streams elects a group of servers for
			// each, which a busy cluster can take longer for than a
			// request's usual 5 s.
			ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Minute)
			defer cancel()
			if err := bus.Setup(ctx, js, opts...); err != nil {
				return err
			}
			// The Slack bridge's own bucket: its credentials may not
			// create it.
			kv, err := slackbridge.Setup(ctx, js)
			if err == nil && n != 0 {
				err = replicate(ctx, js, kv, n)
			}
			if err != nil {
				return err
			}
			// The gateway's: the session index, the API's records,
			// which clients write, and the webhooks.
			if err := gateway.Setup(ctx, js); err != nil {
				return err
			}
			if n != 0 {
				if err := replicateStream(ctx, js, bus.StreamWebhooks, n); err != nil {
					return err
				}
			}
			for _, b := range []string{bus.BucketSessions, bus.BucketGateway, bus.BucketWebhooks} {
				if kv, err = js.KeyValue(ctx, b); err == nil && n != 0 {
					err = replicate(ctx, js, kv, n)
				}
				if err != nil {
					return err
				}
			}
			fmt.Fprintln(e.stdout, "streams and buckets are set up")
			return nil
		},
	}
	cmd.Flags().StringVar(&url, "nats", e.natsURL(), "NATS URL of the platform, or a cluster's URLs separated by commas (CORRAL_NATS_URL)")
	cmd.Flags().IntVar(&replicas, "replicas", 0, "copies of each stream and bucket, on as many servers of a NATS cluster (default: CORRAL_NATS_REPLICAS, else 1 for new ones and existing ones unchanged)")
	return cmd
}

// replicateStream gives stream n replicas, changing nothing else.
func replicateStream(ctx context.Context, js jetstream.JetStream, stream string, n int) error {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("stream %s: %w", stream, err)
	}
	cfg := st.CachedInfo().Config
	if cfg.Replicas == n {
		return nil
	}
	cfg.Replicas = n
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("stream %s: %d replicas: %w", stream, n, err)
	}
	return nil
}

// replicate gives the KV bucket kv n replicas. Its stream is changed in
// that alone: the Slack bridge's bucket allows no roll-up, which updating
// it as a bucket would allow again.
func replicate(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, n int) error {
	st, err := js.Stream(ctx, "KV_"+kv.Bucket())
	if err != nil {
		return fmt.Errorf("kv %s: %w", kv.Bucket(), err)
	}
	cfg := st.CachedInfo().Config
	if cfg.Replicas == n {
		return nil
	}
	cfg.Replicas = n
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("kv %s: %d replicas: %w", kv.Bucket(), n, err)
	}
	return nil
}
