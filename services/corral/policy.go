package main

import (
	"cmp"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"corral.dev/pkg/policy"
	"corral.dev/pkg/tool"
)

func (e *env) policyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Work with the policy that decides which tool calls run",
	}
	var file, toolName, args, tenant, user string
	check := &cobra.Command{
		Use:   "check",
		Short: "Print what the policy decides for one tool call, and the rule that decided it",
		Example: `  corral policy check --tool Bash --args '{"command":"git push"}'
  corral policy check --file deploy/policy.yaml --tenant acme --tool Write --args '{"file_path":"/skills/x/SKILL.md","content":"..."}'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p := policy.Default()
			if file != "" {
				var err error
				if p, err = policy.Load(file); err != nil {
					return &exitError{2, err}
				}
			}
			if _, err := tool.Parse(toolName, json.RawMessage(args)); err != nil {
				return &exitError{2, err}
			}
			d := p.Decide(policy.Call{Tenant: tenant, User: user, Tool: toolName, Input: json.RawMessage(args)})
			switch {
			case d.Rule == "":
				fmt.Fprintf(e.stdout, "%s (no rule matched)\n", d.Decision)
			case d.Reason == "":
				fmt.Fprintf(e.stdout, "%s by rule %s\n", d.Decision, d.Rule)
			default:
				fmt.Fprintf(e.stdout, "%s by rule %s: %s\n", d.Decision, d.Rule, d.Reason)
			}
			return nil
		},
	}
	f := check.Flags()
	f.StringVar(&file, "file", e.getenv("CORRAL_POLICY_FILE"), "policy file (CORRAL_POLICY_FILE; default the built-in deploy/policy.yaml)")
	f.StringVar(&toolName, "tool", "", "tool name: Bash, Read, Write, Edit, Glob or Grep")
	f.StringVar(&args, "args", "{}", "the call's arguments, as JSON")
	f.StringVar(&tenant, "tenant", cmp.Or(e.getenv("CORRAL_TENANT"), "default"), "tenant (CORRAL_TENANT)")
	f.StringVar(&user, "user", cmp.Or(e.getenv("CORRAL_USER"), e.getenv("USER"), "anonymous"), "user (CORRAL_USER)")
	_ = check.MarkFlagRequired("tool")
	cmd.AddCommand(check)
	return cmd
}
