package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"corral.dev/pkg/policy"
	"corral.dev/pkg/tool"
)

func (e *env) policyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Work with the policy that decides which tool calls run",
	}
	var file, toolName, args, tenant, user, target, method string
	check := &cobra.Command{
		Use:   "check",
		Short: "Print what the policy decides for one tool call or one request out of a sandbox, and the rule that decided it",
		Long: `Print what the policy decides for one tool call or one request out of a
sandbox, and the rule that decided it. It exits 0 when the policy allows it,
3 when it waits for a reviewer's approval, 1 when it is denied, and 2 when
the command line, the call or the policy file is wrong: so that scripts can
ask, as with kubectl auth can-i.`,
		Example: `  corral policy check --tool Bash --args '{"command":"rm -rf build"}'
  corral policy check --file deploy/policy.yaml --tenant acme --tool Write --args '{"file_path":"/skills/x/SKILL.md","content":"..."}'
  corral policy check --tenant acme --url https://github.com/acme/app.git/git-receive-pack --method POST`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p := policy.Default()
			if file != "" {
				var err error
				if p, err = policy.Load(file); err != nil {
					return &exitError{2, err}
				}
			}
			var d policy.Decision
			switch {
			case (toolName == "") == (target == ""):
				return &exitError{2, fmt.Errorf("give a tool call (--tool) or a request (--url), one of the two")}
			case target != "":
				r, err := egressRequest(target, method)
				if err != nil {
					return &exitError{2, err}
				}
				r.Tenant, r.User = tenant, user
				d, _ = p.Egress(r)
			default:
				if _, err := tool.Parse(toolName, json.RawMessage(args)); err != nil {
					return &exitError{2, err}
				}
				d = p.Decide(policy.Call{Tenant: tenant, User: user, Tool: toolName, Input: json.RawMessage(args)})
			}
			switch {
			case d.Rule == "":
				fmt.Fprintf(e.stdout, "%s (no rule matched)\n", d.Decision)
			case d.Reason == "":
				fmt.Fprintf(e.stdout, "%s by rule %s\n", d.Decision, d.Rule)
			default:
				fmt.Fprintf(e.stdout, "%s by rule %s: %s\n", d.Decision, d.Rule, d.Reason)
			}
			return checkStatus(d.Decision)
		},
	}
	f := check.Flags()
	f.StringVar(&file, "file", e.getenv("CORRAL_POLICY_FILE"), "policy file (CORRAL_POLICY_FILE; default the built-in deploy/policy.yaml)")
	f.StringVar(&toolName, "tool", "", "tool name: Bash, Read, Write, Edit, Glob or Grep")
	f.StringVar(&args, "args", "{}", "the call's arguments, as JSON")
	f.StringVar(&target, "url", "", "a request a sandbox would send out, instead of a tool call: its URL")
	f.StringVar(&method, "method", "GET", "the request's method, with --url")
	f.StringVar(&tenant, "tenant", cmp.Or(e.getenv("CORRAL_TENANT"), "default"), "tenant (CORRAL_TENANT)")
	f.StringVar(&user, "user", cmp.Or(e.getenv("CORRAL_USER"), e.getenv("USER"), "anonymous"), "user (CORRAL_USER)")
	presets := &cobra.Command{
		Use:   "presets",
		Short: "List the host presets an egress rule may name, and their hosts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "PRESET\tHOSTS (ports 80 and 443)")
			for _, p := range policy.Presets() {
				fmt.Fprintf(w, "%s\t%s\n", p.Name, strings.Join(p.Hosts, " "))
			}
			return w.Flush()
		},
	}
	cmd.AddCommand(check, presets)
	return cmd
}

// Exit statuses of corral policy check, as kubectl auth can-i's: 0 only
// when the call would run without a person.
const (
	exitDenied   = 1
	exitApproval = 3
)

// checkStatus is corral policy check's exit status for decision.
func checkStatus(decision string) error {
	switch decision {
	case policy.Allow:
		return nil
	case policy.Approve:
		return &exitError{code: exitApproval}
	}
	return &exitError{code: exitDenied}
}

// egressRequest is the request to target with method, as egress judges it.
func egressRequest(target, method string) (policy.EgressRequest, error) {
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return policy.EgressRequest{}, fmt.Errorf("--url %q: want an http:// or https:// URL", target)
	}
	port := 443
	if u.Scheme == "http" {
		port = 80
	}
	if p := u.Port(); p != "" {
		if port, err = strconv.Atoi(p); err != nil {
			return policy.EgressRequest{}, fmt.Errorf("--url %q: bad port", target)
		}
	}
	return policy.EgressRequest{
		Scheme: u.Scheme, Host: u.Hostname(), Port: port,
		Visible: true, Method: strings.ToUpper(method), Path: u.Path,
	}, nil
}
