package main

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"corral.dev/pkg/egressapi"
)

// vaultFlags are what every vault command needs to say whose vaults.
type vaultFlags struct {
	url, tenant, user string
	tenantWide        bool
	// asJSON is a listing's --json.
	asJSON bool
}

func (e *env) addVaultFlags(cmd *cobra.Command, f *vaultFlags) {
	cmd.Flags().StringVar(&f.url, "nats", e.natsURL(), "NATS URL of the platform (CORRAL_NATS_URL)")
	cmd.Flags().StringVar(&f.tenant, "tenant", cmp.Or(e.getenv("CORRAL_TENANT"), "default"), "your tenant (CORRAL_TENANT)")
	cmd.Flags().StringVar(&f.user, "user", cmp.Or(e.getenv("CORRAL_USER"), e.getenv("USER"), "anonymous"), "you: a vault is yours unless --tenant-wide (CORRAL_USER)")
}

// subject is where f's requests of op go.
func (f *vaultFlags) subject(op string) string {
	if f.tenantWide {
		return egressapi.TenantVaultSubject(f.tenant, op)
	}
	return egressapi.VaultSubject(f.tenant, f.user, op)
}

func (e *env) vaultsCmd() *cobra.Command {
	var f vaultFlags
	cmd := &cobra.Command{
		Use:   "vaults",
		Short: "Manage the credentials egress injects into your sessions' requests",
		Long: `A vault holds one secret (a token, a password) and says where it may go:
the hosts (and optionally path prefixes) of the requests it is injected into,
and how (a header, or HTTP basic authentication as git over HTTPS takes a
token). The sandbox never sees it: the egress service adds it to the
sandbox's requests to those hosts and redacts it from what comes back.

A vault is yours (your sessions use it) unless made --tenant-wide, which
takes a reviewer's credential (every session of the tenant uses it). Listing
never shows a secret. The secret is read from standard input, or from
--secret-file, never from the command line:

  printf %s "$GITHUB_TOKEN" | corral vaults create github --host github.com --basic-user x-access-token
  corral vaults create npm --host registry.npmjs.org --header Authorization --prefix "Bearer " --secret-file ~/.npm-token`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return e.listVaults(cmd, &f) },
	}
	e.addVaultFlags(cmd, &f)
	jsonFlag(cmd, &f.asJSON)
	var lf vaultFlags
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List your vaults and the tenant's (never their secrets)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return e.listVaults(cmd, &lf) },
	}
	e.addVaultFlags(ls, &lf)
	jsonFlag(ls, &lf.asJSON)
	cmd.AddCommand(ls, e.vaultCreateCmd(), e.vaultRotateCmd(), e.vaultRemoveCmd())
	return cmd
}

// vaultJSON is a vault as vaults ls --json prints it: never its secret.
type vaultJSON struct {
	Name string `json:"name"`
	// User is the user whose sessions use it, "" for the tenant's.
	User  string   `json:"user"`
	Hosts []string `json:"hosts"`
	Paths []string `json:"paths"`
	// Header and Prefix, or BasicUser, say how it is injected.
	Header    string    `json:"header,omitempty"`
	Prefix    string    `json:"prefix,omitempty"`
	BasicUser string    `json:"basic_user,omitempty"`
	Version   int       `json:"version"`
	CreatedAt time.Time `json:"created_at"`
	RotatedAt time.Time `json:"rotated_at,omitzero"`
}

func (e *env) listVaults(cmd *cobra.Command, f *vaultFlags) error {
	var resp egressapi.VaultReply
	if err := e.request(cmd.Context(), f.url, "egress service", f.subject(egressapi.OpList), egressapi.VaultRequest{}, &resp); err != nil {
		return err
	}
	if f.asJSON {
		out := make([]vaultJSON, len(resp.Vaults))
		for i, v := range resp.Vaults {
			out[i] = vaultJSON{Name: v.Name, User: v.User, Hosts: v.Hosts, Paths: v.Paths, Header: v.Inject.Header, Prefix: v.Inject.Prefix,
				BasicUser: v.Inject.BasicUser, Version: v.Version, CreatedAt: v.CreatedAt, RotatedAt: v.RotatedAt}
		}
		return writeJSONLines(e.stdout, out...)
	}
	if len(resp.Vaults) == 0 {
		fmt.Fprintln(e.stdout, "No vaults: corral vaults create NAME --host HOST ... makes one.")
		return nil
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tOWNER\tHOSTS\tPATHS\tINJECTED AS\tVERSION\tCHANGED")
	for _, v := range resp.Vaults {
		owner := cmp.Or(v.User, "(tenant)")
		changed := v.CreatedAt
		if !v.RotatedAt.IsZero() {
			changed = v.RotatedAt
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", v.Name, owner, strings.Join(v.Hosts, ","), cmp.Or(strings.Join(v.Paths, ","), "any"),
			injection(v.Inject), v.Version, changed.Local().Format(time.DateTime))
	}
	return w.Flush()
}

// injection says how a vault's secret goes into a request, without it.
func injection(in egressapi.Injection) string {
	if in.BasicUser != "" {
		return "basic auth as " + in.BasicUser
	}
	return fmt.Sprintf("%s: %s***", in.Header, in.Prefix)
}

func (e *env) vaultCreateCmd() *cobra.Command {
	var f vaultFlags
	var v egressapi.Vault
	var secretFile string
	cmd := &cobra.Command{
		Use:   "create NAME --host HOST (--header H [--prefix P] | --basic-user U)",
		Short: "Make a vault: a secret, the hosts it may go to and how it is injected",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v.Name = args[0]
			if len(v.Hosts) == 0 {
				return &exitError{2, fmt.Errorf("say where the secret may go with --host (repeat it for more)")}
			}
			secret, err := readSecret(cmd, secretFile)
			if err != nil {
				return err
			}
			var resp egressapi.VaultReply
			if err := e.request(cmd.Context(), f.url, "egress service", f.subject(egressapi.OpCreate), egressapi.VaultRequest{Vault: v, Secret: secret}, &resp); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "vault %s made for %s: %s, injected as %s\n", resp.Vault.Name, cmp.Or(resp.Vault.User, "the tenant"), strings.Join(resp.Vault.Hosts, ","), injection(resp.Vault.Inject))
			return nil
		},
	}
	e.addVaultFlags(cmd, &f)
	cmd.Flags().BoolVar(&f.tenantWide, "tenant-wide", false, "for every session of the tenant (a reviewer's credential)")
	cmd.Flags().StringSliceVar(&v.Hosts, "host", nil, "a host the secret may be sent to (github.com, *.example.com); repeat for more")
	cmd.Flags().StringSliceVar(&v.Paths, "path", nil, "only requests whose path starts with this (/org/); repeat for more")
	cmd.Flags().StringVar(&v.Inject.Header, "header", "", "inject as this header (Authorization)")
	cmd.Flags().StringVar(&v.Inject.Prefix, "prefix", "", "what goes before the secret in the header (\"Bearer \")")
	cmd.Flags().StringVar(&v.Inject.BasicUser, "basic-user", "", "inject as HTTP basic authentication as this user, the secret as password (git over HTTPS)")
	cmd.Flags().StringVar(&secretFile, "secret-file", "", "read the secret from this file instead of standard input")
	return cmd
}

func (e *env) vaultRotateCmd() *cobra.Command {
	var f vaultFlags
	var secretFile string
	cmd := &cobra.Command{
		Use:   "rotate NAME",
		Short: "Replace a vault's secret; its bindings stay",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			secret, err := readSecret(cmd, secretFile)
			if err != nil {
				return err
			}
			var resp egressapi.VaultReply
			req := egressapi.VaultRequest{Vault: egressapi.Vault{Name: args[0]}, Secret: secret}
			if err := e.request(cmd.Context(), f.url, "egress service", f.subject(egressapi.OpRotate), req, &resp); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "vault %s rotated: version %d\n", resp.Vault.Name, resp.Vault.Version)
			return nil
		},
	}
	e.addVaultFlags(cmd, &f)
	cmd.Flags().BoolVar(&f.tenantWide, "tenant-wide", false, "the tenant's vault of that name (a reviewer's credential)")
	cmd.Flags().StringVar(&secretFile, "secret-file", "", "read the secret from this file instead of standard input")
	return cmd
}

func (e *env) vaultRemoveCmd() *cobra.Command {
	var f vaultFlags
	cmd := &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove a vault: its secret goes into no request any more",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var resp egressapi.VaultReply
			req := egressapi.VaultRequest{Vault: egressapi.Vault{Name: args[0]}}
			if err := e.request(cmd.Context(), f.url, "egress service", f.subject(egressapi.OpRemove), req, &resp); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "vault %s removed\n", args[0])
			return nil
		},
	}
	e.addVaultFlags(cmd, &f)
	cmd.Flags().BoolVar(&f.tenantWide, "tenant-wide", false, "the tenant's vault of that name (a reviewer's credential)")
	return cmd
}

// readSecret reads a secret from file, or from standard input, without
// its final line break.
func readSecret(cmd *cobra.Command, file string) (string, error) {
	var data []byte
	var err error
	if file != "" {
		data, err = os.ReadFile(file)
	} else {
		data, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), 16<<10))
	}
	if err != nil {
		return "", &exitError{2, fmt.Errorf("read the secret: %w", err)}
	}
	secret := strings.TrimRight(string(data), "\r\n")
	if secret == "" {
		return "", &exitError{2, fmt.Errorf("no secret: give it on standard input or with --secret-file")}
	}
	return secret, nil
}
