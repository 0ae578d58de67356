package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/environment"
	"corral.dev/pkg/environment/envfile"
	"corral.dev/pkg/environmentapi"
)

// environmentFlags are what every environments command needs to say whose
// environments.
type environmentFlags struct {
	url, tenant, user string
	// asJSON is --json, of the commands that list and show.
	asJSON bool
}

func (e *env) addEnvironmentFlags(cmd *cobra.Command, f *environmentFlags) {
	cmd.Flags().StringVar(&f.url, "nats", e.natsURL(), "NATS URL of the platform (CORRAL_NATS_URL)")
	cmd.Flags().StringVar(&f.tenant, "tenant", cmp.Or(e.getenv("CORRAL_TENANT"), "default"), "your tenant (CORRAL_TENANT)")
	cmd.Flags().StringVar(&f.user, "user", cmp.Or(e.getenv("CORRAL_USER"), e.getenv("USER"), "anonymous"), "you (CORRAL_USER)")
}

// ask sends req for op on f's tenant's environments: a read as f's user, a
// change on the tenant's own subject, which only a reviewer's or an
// operator's credential may publish on.
func (f *environmentFlags) ask(ctx context.Context, e *env, op string, req environmentapi.Request) (environmentapi.Reply, error) {
	subject := environmentapi.Subject(f.tenant, f.user, op)
	if environmentapi.Writes(op) {
		subject = environmentapi.TenantSubject(f.tenant, op)
	}
	var reply environmentapi.Reply
	err := e.request(ctx, f.url, "sandbox-manager", subject, req, &reply)
	if errors.Is(err, bus.ErrRefused) {
		what := map[string]string{environmentapi.OpPut: "creating or changing", environmentapi.OpRemove: "removing", environmentapi.OpDefault: "choosing the default of"}[op]
		return reply, &exitError{1, fmt.Errorf("%s environments takes a reviewer's or an operator's credential of tenant %s (corral credentials issue --role reviewer): an environment decides what its sessions may reach on the network. This credential may list and show them (%w)", what, f.tenant, err)}
	}
	return reply, err
}

func (e *env) environmentsCmd() *cobra.Command {
	var f environmentFlags
	cmd := &cobra.Command{
		Use:     "environments",
		Aliases: []string{"environment", "env"},
		Short:   "Manage the tenant's environments: what its sessions may reach, install and set up",
		Long: `An environment is a named, per-tenant definition of what its sessions get:
the hosts they may reach beyond the policy (egress presets and hosts), the
packages installed for them (pip, npm, go) and a setup script. Its setup
runs once per version of the definition; what it leaves in /opt/env is
stored and bound read-only into every session of that version, its
programs first on PATH and PYTHONPATH and NODE_PATH set.

  name: py-tools
  description: Python with the HTTP libraries
  egress:
    presets: [pypi]        # pypi, npm, go, crates, debian, github
    hosts: [files.example.com, "*.example.org"]
  packages:
    pip: [requests==2.32.0]
    npm: [left-pad@1.3.0]
    go: [golang.org/x/tools/cmd/stringer@v0.30.0]
  setup: |
    echo any shell, run after the packages, with /opt/env writable

A session runs in the environment its request names (corral run --environment),
or in the tenant's default. Anyone of the tenant may list and show them;
creating, changing, removing them and choosing the default take a
reviewer's or an operator's credential.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return e.listEnvironments(cmd, &f) },
	}
	e.addEnvironmentFlags(cmd, &f)
	jsonFlag(cmd, &f.asJSON)
	var lf environmentFlags
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the tenant's environments: version, built or not, the default",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return e.listEnvironments(cmd, &lf) },
	}
	e.addEnvironmentFlags(ls, &lf)
	jsonFlag(ls, &lf.asJSON)
	cmd.AddCommand(ls, e.environmentCreateCmd(), e.environmentShowCmd(), e.environmentRemoveCmd(), e.environmentDefaultCmd())
	return cmd
}

// shortVersion is how a version is shown in a listing.
func shortVersion(v string) string { return v[:min(len(v), 12)] }

// environmentJSON is an environment as environments ls --json and
// environments show --json print it: its definition as create takes it
// (in JSON), and its build.
type environmentJSON struct {
	Name        string           `json:"name"`
	Description string           `json:"description"`
	Version     string           `json:"version"`
	Default     bool             `json:"default"`
	Built       bool             `json:"built"`
	BuiltAt     time.Time        `json:"built_at,omitzero"`
	SetupMS     int64            `json:"setup_ms,omitempty"`
	UpdatedAt   time.Time        `json:"updated_at"`
	Spec        environment.Spec `json:"spec"`
}

func newEnvironmentJSON(en *environmentapi.Environment) environmentJSON {
	out := environmentJSON{Name: en.Spec.Name, Description: en.Spec.Description, Version: en.Version, Default: en.Default,
		Built: en.IsBuilt(), UpdatedAt: en.UpdatedAt, Spec: en.Spec}
	if out.Built {
		out.BuiltAt, out.SetupMS = en.Built.At, en.Built.SetupMS
	}
	return out
}

func (e *env) listEnvironments(cmd *cobra.Command, f *environmentFlags) error {
	resp, err := f.ask(cmd.Context(), e, environmentapi.OpList, environmentapi.Request{})
	if err != nil {
		return err
	}
	if f.asJSON {
		out := make([]environmentJSON, len(resp.Environments))
		for i := range resp.Environments {
			out[i] = newEnvironmentJSON(&resp.Environments[i])
		}
		return writeJSONLines(e.stdout, out...)
	}
	if len(resp.Environments) == 0 {
		fmt.Fprintln(e.stdout, "No environments: corral environments create FILE.yaml makes one.")
		return nil
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tVERSION\tBUILT\tDEFAULT\tDESCRIPTION")
	for _, en := range resp.Environments {
		built := "no"
		if en.IsBuilt() {
			built = "yes"
		}
		def := ""
		if en.Default {
			def = "*"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", en.Spec.Name, shortVersion(en.Version), built, def, firstLine(en.Spec.Description))
	}
	return w.Flush()
}

// firstLine is s up to its first line break.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func (e *env) environmentCreateCmd() *cobra.Command {
	var f environmentFlags
	var makeDefault bool
	cmd := &cobra.Command{
		Use:   "create FILE.yaml [--default]",
		Short: "Create the environment FILE defines, or replace the one of its name",
		Long: `Create the environment FILE.yaml defines, or replace the one of its name
(creating it again is harmless: it says whether anything changed). Sessions
already running keep the version they started with; new ones run in the
new version, whose setup the first of them runs. Takes a reviewer's or an
operator's credential.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, err := os.ReadFile(args[0])
			if errors.Is(err, fs.ErrNotExist) {
				return &exitError{2, fmt.Errorf("%s: no such file", args[0])}
			}
			if err != nil {
				return &exitError{2, err}
			}
			spec, err := envfile.Parse(data)
			if err != nil {
				return &exitError{2, fmt.Errorf("%s: %w", args[0], err)}
			}
			resp, err := f.ask(cmd.Context(), e, environmentapi.OpPut, environmentapi.Request{Spec: &spec, Default: makeDefault})
			if err != nil {
				return err
			}
			en := resp.Environment
			msg := fmt.Sprintf("environment %s %s: version %s", en.Spec.Name, resp.Outcome, shortVersion(en.Version))
			switch {
			case en.IsBuilt():
				msg += ", built"
			default:
				msg += ", not built yet: the first session in it runs its setup"
			}
			if en.Default {
				msg += "; the tenant's default"
			}
			fmt.Fprintln(e.stdout, msg)
			return nil
		},
	}
	e.addEnvironmentFlags(cmd, &f)
	cmd.Flags().BoolVar(&makeDefault, "default", false, "make it the tenant's default: sessions that name no environment run in it")
	return cmd
}

func (e *env) environmentShowCmd() *cobra.Command {
	var f environmentFlags
	cmd := &cobra.Command{
		Use:   "show NAME",
		Short: "Print an environment's definition, as create takes it, and its build",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := f.ask(cmd.Context(), e, environmentapi.OpShow, environmentapi.Request{Name: args[0]})
			if err != nil {
				return err
			}
			en := resp.Environment
			if f.asJSON {
				return writeJSONLines(e.stdout, newEnvironmentJSON(en))
			}
			out, err := envfile.Format(en.Spec)
			if err != nil {
				return err
			}
			// The build's facts as comments: the output is a definition
			// create takes back.
			fmt.Fprintf(e.stdout, "%s# version %s\n", out, en.Version)
			if en.IsBuilt() {
				fmt.Fprintf(e.stdout, "# built %s; its setup took %s\n", en.Built.At.Local().Format(time.DateTime), time.Duration(en.Built.SetupMS)*time.Millisecond)
			} else {
				fmt.Fprintln(e.stdout, "# not built yet: the first session in it runs its setup")
			}
			fmt.Fprintf(e.stdout, "# updated %s\n", en.UpdatedAt.Local().Format(time.DateTime))
			if en.Default {
				fmt.Fprintln(e.stdout, "# the tenant's default")
			}
			return nil
		},
	}
	e.addEnvironmentFlags(cmd, &f)
	jsonFlag(cmd, &f.asJSON)
	return cmd
}

func (e *env) environmentRemoveCmd() *cobra.Command {
	var f environmentFlags
	cmd := &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove an environment: new sessions can no longer name it",
		Long: `Remove an environment, and the tenant's default if it was. Sessions
running in it keep its files in /opt/env, but their sandboxes reach only
what the policy allows from then on. Takes a reviewer's or an operator's
credential.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := f.ask(cmd.Context(), e, environmentapi.OpRemove, environmentapi.Request{Name: args[0]})
			if err != nil {
				return err
			}
			msg := "environment " + args[0] + " removed"
			if resp.Environment.Default {
				msg += "; the tenant has no default environment now"
			}
			fmt.Fprintln(e.stdout, msg)
			return nil
		},
	}
	e.addEnvironmentFlags(cmd, &f)
	return cmd
}

func (e *env) environmentDefaultCmd() *cobra.Command {
	var f environmentFlags
	var none bool
	cmd := &cobra.Command{
		Use:   "default NAME | --none",
		Short: "Make an environment the tenant's default, for the sessions that name none",
		Args: func(cmd *cobra.Command, args []string) error {
			if none {
				return cobra.NoArgs(cmd, args)
			}
			return cobra.ExactArgs(1)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			name := ""
			if !none {
				name = args[0]
			}
			resp, err := f.ask(cmd.Context(), e, environmentapi.OpDefault, environmentapi.Request{Name: name})
			if err != nil {
				return err
			}
			if resp.Default == "" {
				fmt.Fprintln(e.stdout, "the tenant has no default environment: sessions that name none run in none")
				return nil
			}
			fmt.Fprintf(e.stdout, "environment %s is the tenant's default: sessions that name none run in it\n", resp.Default)
			return nil
		},
	}
	e.addEnvironmentFlags(cmd, &f)
	cmd.Flags().BoolVar(&none, "none", false, "leave the tenant no default")
	return cmd
}
