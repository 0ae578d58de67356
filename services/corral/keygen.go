package main

import (
	"crypto/ed25519"
	"fmt"

	"github.com/spf13/cobra"

	"corral.dev/pkg/event"
)

func (e *env) keygenCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "keygen",
		Short: "Make the approval service's signing key and its public half, as environment lines",
		Long: `Prints a new Ed25519 key pair as two environment lines: the approval
service signs every decision with CORRAL_APPROVAL_SIGNING_KEY, and the
harness runs a held call only on a decision that CORRAL_APPROVAL_PUBLIC_KEY
verifies. Append them to the env file of a deployment:

  corral approvals keygen >> .env`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			pub, key, err := ed25519.GenerateKey(nil)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "CORRAL_APPROVAL_SIGNING_KEY=%s\nCORRAL_APPROVAL_PUBLIC_KEY=%s\n", event.EncodeKey(key), event.EncodeKey(pub))
			return nil
		},
	}
}
