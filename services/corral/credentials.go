package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
)

// credentialJSON is a credential as credentials ls --json prints it:
// never its secret, nor the secret's hash.
type credentialJSON struct {
	ID      string    `json:"id"`
	Tenant  string    `json:"tenant"`
	Role    string    `json:"role"`
	User    string    `json:"user"`
	Label   string    `json:"label,omitempty"`
	Created time.Time `json:"created"`
}

func (e *env) credentialsCmd() *cobra.Command {
	var url string
	cmd := &cobra.Command{
		Use:   "credentials",
		Short: "Issue, list and revoke client credentials (as an administrator)",
		Long: `A client credential grants one tenant: as one user (--user), or as a bot that
speaks for any user of the tenant (--bot), or as a reviewer, a bot that also
decides approvals (--reviewer). A client signs in with the credential's ID as
its NATS user and its secret as its password (CORRAL_NATS_USER and
CORRAL_NATS_PASSWORD for corral). The secret is printed once, when the
credential is issued, and kept only as a hash.

These commands write the credentials bucket, which only the admin user may:
CORRAL_NATS_USER=admin CORRAL_NATS_PASSWORD=... corral credentials ...`,
	}
	cmd.PersistentFlags().StringVar(&url, "nats", e.natsURL(), "NATS server URL (CORRAL_NATS_URL)")

	var tenant, user, label string
	var bot, reviewer, operator bool
	issue := &cobra.Command{
		Use:   "issue",
		Short: "Issue a credential and print its ID and secret",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			role := credential.RoleUser
			switch {
			case bot && reviewer, operator && (bot || reviewer):
				return usageError(errors.New("--bot, --reviewer, --operator: pick one"))
			case operator:
				role, tenant = credential.RoleOperator, credential.AllTenants
			case bot:
				role = credential.RoleBot
			case reviewer:
				role = credential.RoleReviewer
			}
			if role == credential.RoleUser && user == "" {
				return usageError(errors.New("--user: a user's credential names its user (or use --bot or --reviewer)"))
			}
			if user == "" {
				user = label
			}
			if user == "" {
				user = string(role)
			}
			c, secret, err := credential.New(tenant, user, role, label)
			if err != nil {
				return err
			}
			kv, closeKV, err := e.credentialsKV(cmd, url)
			if err != nil {
				return err
			}
			defer closeKV()
			b, err := json.Marshal(&c)
			if err != nil {
				return err
			}
			if _, err := kv.Create(cmd.Context(), c.ID, b); err != nil {
				return fmt.Errorf("keep credential: %w", err)
			}
			fmt.Fprintf(e.stdout, "CORRAL_NATS_USER=%s\nCORRAL_NATS_PASSWORD=%s\n", c.ID, secret)
			fmt.Fprintf(e.stderr, "Issued a %s credential of tenant %q (user %q). The secret is shown this once.\nWith the nats CLI: --user %s --password <secret> --inbox-prefix %s\nAs a key of the HTTP API (x-api-key): %s:<secret>\n",
				c.Role, c.Tenant, c.User, c.ID, c.Inbox(), c.ID)
			return nil
		},
	}
	issue.Flags().StringVar(&tenant, "tenant", "", "the tenant the credential grants (all but an operator's)")
	issue.Flags().StringVar(&user, "user", "", "the user it acts as (for a bot or reviewer: who holds it)")
	issue.Flags().BoolVar(&bot, "bot", false, "speaks for any user of the tenant")
	issue.Flags().BoolVar(&reviewer, "reviewer", false, "a bot that also decides approvals")
	issue.Flags().BoolVar(&operator, "operator", false, "a reviewer of every tenant, for the people who run the platform")
	issue.Flags().StringVar(&label, "label", "", "what it is for, shown by ls")

	var only string
	var asJSON bool
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List credentials (never their secrets)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			kv, closeKV, err := e.credentialsKV(cmd, url)
			if err != nil {
				return err
			}
			defer closeKV()
			lister, err := kv.ListKeys(cmd.Context())
			if err != nil {
				return err
			}
			var out []credential.Credential
			for k := range lister.Keys() {
				entry, err := kv.Get(cmd.Context(), k)
				if err != nil {
					continue // revoked meanwhile
				}
				var c credential.Credential
				if json.Unmarshal(entry.Value(), &c) != nil || (only != "" && c.Tenant != only) {
					continue
				}
				c.SecretHash = ""
				out = append(out, c)
			}
			slices.SortFunc(out, func(a, b credential.Credential) int { return a.Created.Compare(b.Created) })
			if asJSON {
				lines := make([]credentialJSON, len(out))
				for i, c := range out {
					lines[i] = credentialJSON{ID: c.ID, Tenant: c.Tenant, Role: string(c.Role), User: c.User, Label: c.Label, Created: c.Created}
				}
				return writeJSONLines(e.stdout, lines...)
			}
			w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tTENANT\tROLE\tUSER\tLABEL\tCREATED")
			for _, c := range out {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", c.ID, c.Tenant, c.Role, c.User, c.Label, c.Created.Format("2006-01-02 15:04"))
			}
			return w.Flush()
		},
	}
	ls.Flags().StringVar(&only, "tenant", "", "only this tenant's")
	jsonFlag(ls, &asJSON)

	revoke := &cobra.Command{
		Use:   "revoke ID...",
		Short: "Revoke credentials: no new sign-in, and live connections are cut within CORRAL_AUTH_TTL",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, ids []string) error {
			kv, closeKV, err := e.credentialsKV(cmd, url)
			if err != nil {
				return err
			}
			defer closeKV()
			for _, id := range ids {
				if !credential.IsID(id) {
					return usageError(fmt.Errorf("%q is not a credential ID", id))
				}
				if _, err := kv.Get(cmd.Context(), id); errors.Is(err, jetstream.ErrKeyNotFound) {
					return fmt.Errorf("no credential %s", id)
				}
				if err := kv.Purge(cmd.Context(), id); err != nil {
					return fmt.Errorf("revoke %s: %w", id, err)
				}
				fmt.Fprintf(e.stderr, "Revoked %s\n", id)
			}
			return nil
		},
	}

	issuer := &cobra.Command{
		Use:   "issuer",
		Short: "Make the auth service's signing key: its seed for the auth service, its public key for the NATS server",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			seed, public, err := credential.NewIssuer()
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "CORRAL_AUTH_ISSUER=%s\nCORRAL_AUTH_ISSUER_SEED=%s\n", public, seed)
			fmt.Fprintln(e.stderr, "Give CORRAL_AUTH_ISSUER to the NATS server (deploy/nats.conf) and CORRAL_AUTH_ISSUER_SEED to the auth service alone.")
			return nil
		},
	}
	cmd.AddCommand(issue, ls, revoke, issuer)
	return cmd
}

// credentialsKV opens the credentials bucket as the signed-in (admin) user.
func (e *env) credentialsKV(cmd *cobra.Command, url string) (jetstream.KeyValue, func(), error) {
	nc, js, err := e.connect(url)
	if err != nil {
		return nil, nil, err
	}
	kv, err := js.KeyValue(cmd.Context(), bus.BucketCredentials)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("open the credentials bucket (as an administrator, after corral setup): %w", err)
	}
	return kv, nc.Close, nil
}
