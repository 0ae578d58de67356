package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"corral.dev/pkg/bus"
)

func (e *env) setupCmd() *cobra.Command {
	var url string
	cmd := &cobra.Command{
		Use:   "setup",
		Short: "Create or update Corral's streams and buckets (run once per version, as an administrator)",
		Long: `Creates the streams, KV buckets and object stores Corral uses, and updates
those whose settings differ. Every service does this at start when its NATS
user may; under deploy/nats.conf they may not, and an administrator
(CORRAL_NATS_USER=admin) runs this once per version instead.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			nc, js, err := e.connect(url)
			if err != nil {
				return err
			}
			defer nc.Close()
			if err := bus.Setup(cmd.Context(), js); err != nil {
				return err
			}
			fmt.Fprintln(e.stdout, "streams and buckets are set up")
			return nil
		},
	}
	cmd.Flags().StringVar(&url, "nats", e.natsURL(), "NATS URL of the platform (CORRAL_NATS_URL)")
	return cmd
}
