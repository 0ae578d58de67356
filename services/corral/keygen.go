package main

import (
	"crypto/ed25519"
	"fmt"

	"github.com/spf13/cobra"

	"corral.dev/pkg/event"
)

// keyPairs are the signing keys of a deployment, by the command that makes
// them: each is a private key's variable and its public half's.
var keyPairs = map[string][][2]string{
	"approvals": {{"CORRAL_APPROVAL_SIGNING_KEY", "CORRAL_APPROVAL_PUBLIC_KEY"}},
	"all": {
		{"CORRAL_APPROVAL_SIGNING_KEY", "CORRAL_APPROVAL_PUBLIC_KEY"},
		{"CORRAL_CALL_SIGNING_KEY", "CORRAL_CALL_PUBLIC_KEY"},
	},
}

// keygenCmd makes the key pairs of which ("approvals" or "all").
func (e *env) keygenCmd(which string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keygen",
		Short: "Make the signing keys of a deployment and their public halves, as environment lines",
		Long: `Prints new Ed25519 key pairs as environment lines: the approval service
signs every decision with CORRAL_APPROVAL_SIGNING_KEY, and the harness runs a
held call only on a decision that CORRAL_APPROVAL_PUBLIC_KEY verifies; the
harness signs every tool call with CORRAL_CALL_SIGNING_KEY, and the
sandbox-manager and the memory service run only calls that
CORRAL_CALL_PUBLIC_KEY verifies. Append them to the env file of a
deployment:

  corral keygen >> .env`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			for _, pair := range keyPairs[which] {
				pub, key, err := ed25519.GenerateKey(nil)
				if err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "%s=%s\n%s=%s\n", pair[0], event.EncodeKey(key), pair[1], event.EncodeKey(pub))
			}
			return nil
		},
	}
	if which == "approvals" {
		cmd.Short = "Make the approval service's signing key and its public half, as environment lines (corral keygen makes every key)"
	}
	return cmd
}
