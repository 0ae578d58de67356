package policy_test

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"corral.dev/pkg/model"
	"corral.dev/pkg/policy"
)

func TestDefaultIsDeployPolicy(t *testing.T) {
	deploy, err := os.ReadFile("../../deploy/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	embedded, err := os.ReadFile("default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(deploy, embedded) {
		t.Error("pkg/policy/default.yaml differs from deploy/policy.yaml: copy deploy/policy.yaml over it")
	}
}

func input(v map[string]any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

func TestDefaultPolicy(t *testing.T) {
	p := policy.Default()
	for _, tc := range []struct {
		name     string
		tool     string
		args     map[string]any
		decision string
		rule     string
	}{
		{"plain shell", "Bash", map[string]any{"command": "go test ./..."}, policy.Allow, ""},
		// Egress, not a tool rule, holds a push and refuses a curl.
		{"git push", "Bash", map[string]any{"command": "git push origin main"}, policy.Allow, ""},
		{"rm -rf", "Bash", map[string]any{"command": "cd /workspace && rm -rf build"}, policy.Approve, "risky-shell"},
		{"curl", "Bash", map[string]any{"command": "curl https://example.com"}, policy.Allow, ""},
		{"ssh", "Bash", map[string]any{"command": "ssh host"}, policy.Approve, "risky-shell"},
		{"write a skill", "Write", map[string]any{"file_path": "/skills/deploy/SKILL.md", "content": "x"}, policy.Approve, "skill-changes"},
		{"edit a skill", "Edit", map[string]any{"file_path": "/skills/deploy/run.sh", "old_string": "a", "new_string": "b"}, policy.Approve, "skill-changes"},
		{"read a skill", "Read", map[string]any{"file_path": "/skills/deploy/SKILL.md"}, policy.Allow, ""},
		{"write a memory", "Write", map[string]any{"file_path": "/memories/notes.md", "content": "x"}, policy.Allow, ""},
		{"own private memory", "Read", map[string]any{"file_path": "/memories/private/todo.md"}, policy.Allow, ""},
		{"workspace file", "Write", map[string]any{"file_path": "notes/a.md", "content": "x"}, policy.Allow, ""},
		{"no arguments", "Bash", nil, policy.Allow, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := p.Decide(policy.Call{Tenant: "acme", User: "ada", Tool: tc.tool, Input: input(tc.args)})
			if d.Decision != tc.decision || d.Rule != tc.rule {
				t.Errorf("Decide = %+v, want %s by rule %q", d, tc.decision, tc.rule)
			}
			if d.Decision != policy.Allow && d.Reason == "" {
				t.Error("no reason given")
			}
		})
	}
}

func TestRoutedPath(t *testing.T) {
	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"Bash", map[string]any{"command": "ls"}, ""},
		{"Read", map[string]any{"file_path": "a/../b.txt"}, "/workspace/b.txt"},
		{"Glob", map[string]any{"pattern": "*"}, "/workspace"},
		{"Grep", map[string]any{"pattern": "x", "path": "/memories"}, "/memories"},
		{"Read", map[string]any{"file_path": "/memories/private/todo.md"}, "/memories/private/ada/todo.md"},
		{"Glob", map[string]any{"pattern": "*", "path": "/memories/private"}, "/memories/private/ada"},
		{"Read", map[string]any{"file_path": "/memories/privateer.md"}, "/memories/privateer.md"},
	} {
		if got := policy.RoutedPath(tc.tool, tc.args, "ada"); got != tc.want {
			t.Errorf("RoutedPath(%s, %v) = %q, want %q", tc.tool, tc.args, got, tc.want)
		}
	}
}

// A tenant's own rules come first; the rule about other users' private
// memories is expressible (and holds for a path naming another user).
func TestTenantRulesAndPrivatePaths(t *testing.T) {
	p, err := policy.Parse([]byte(`
rules:
  - name: others-private
    when: path.startsWith("/memories/private/") && !path.startsWith("/memories/private/" + user + "/")
    decision: deny
    reason: not yours
  - name: shell-approval
    when: tool == "Bash"
    decision: approve
tenants:
  acme:
    rules:
      - name: acme-shell
        when: tool == "Bash" && args.command.startsWith("make ")
        decision: allow
`))
	if err != nil {
		t.Fatal(err)
	}
	bash := func(tenant, cmd string) policy.Decision {
		return p.Decide(policy.Call{Tenant: tenant, User: "ada", Tool: "Bash", Input: input(map[string]any{"command": cmd})})
	}
	if d := bash("acme", "make test"); d.Decision != policy.Allow || d.Rule != "acme-shell" {
		t.Errorf("acme make = %+v, want allowed by acme-shell", d)
	}
	if d := bash("acme", "ls"); d.Decision != policy.Approve || d.Rule != "shell-approval" {
		t.Errorf("acme ls = %+v, want approve by shell-approval", d)
	}
	if d := bash("other", "make test"); d.Decision != policy.Approve {
		t.Errorf("other tenant's make = %+v, want approve", d)
	}
	// As a rule sees a path that names another user explicitly.
	vars := policy.Call{Tenant: "acme", User: "ada", Tool: "Read", Input: input(map[string]any{"file_path": "/memories/private/todo.md"})}
	if d := p.Decide(vars); d.Decision != policy.Allow {
		t.Errorf("own private memory = %+v, want allowed", d)
	}
	q, err := policy.Parse([]byte(`
rules:
  - name: others-private
    when: path.startsWith("/memories/private/") && !path.startsWith("/memories/private/" + user + "/")
    decision: deny
`))
	if err != nil {
		t.Fatal(err)
	}
	if d := q.Decide(policy.Call{Tenant: "acme", User: "bob", Tool: "Read", Input: input(map[string]any{"file_path": "/memories/private/todo.md"})}); d.Decision != policy.Allow {
		t.Errorf("bob's own = %+v", d)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"bad decision", "rules:\n  - name: r\n    when: 'true'\n    decision: maybe\n", `rule r: decision "maybe"`},
		{"bad expression", "rules:\n  - name: r\n    when: 'tool =='\n    decision: deny\n", "rule r:"},
		{"not a bool", "rules:\n  - name: r\n    when: 'tool'\n    decision: deny\n", "want a bool"},
		{"unknown variable", "rules:\n  - name: r\n    when: 'secret == 1'\n    decision: deny\n", "undeclared reference"},
		{"unknown field", "rule:\n  - name: r\n", "field rule not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := policy.Parse([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if p, err := policy.Parse(nil); err != nil || p.Decide(policy.Call{Tool: "Bash"}).Decision != policy.Allow {
		t.Errorf("empty policy: %v", err)
	}
}

func TestBudgets(t *testing.T) {
	p, err := policy.Parse([]byte(`
budgets:
  session: {steps: 10, wall_time: 1h}
  user_daily: {cost_usd: 5}
prices:
  "openai:a": {input: 2, output: 8}
  "*": {input: 1, output: 1}
tenants:
  acme:
    budgets:
      session: {steps: 3}
`))
	if err != nil {
		t.Fatal(err)
	}
	if b := p.Budgets("acme"); b.Session.Steps != 3 || b.Session.WallTime != time.Hour || b.UserDaily.CostUSD != 5 {
		t.Errorf("acme's budgets = %+v: want its steps over the global wall time and daily cost", b)
	}
	if b := p.Budgets("other"); b.Session.Steps != 10 {
		t.Errorf("other's budgets = %+v", b)
	}
	if got := p.Cost("openai:a", model.Usage{InputTokens: 1_000_000, OutputTokens: 500_000}); got != 6 {
		t.Errorf("cost = %v, want 6", got)
	}
	if got := p.Cost("anthropic:b", model.Usage{InputTokens: 1_000_000}); got != 1 {
		t.Errorf("cost by * = %v, want 1", got)
	}
	l := policy.Limits{Steps: 3, Tokens: 100, CostUSD: 1, SandboxSeconds: 10, WallTime: time.Minute}
	for _, tc := range []struct {
		u       policy.Usage
		elapsed time.Duration
		want    string
	}{
		{policy.Usage{Steps: 2, InputTokens: 50, CostUSD: 0.5, SandboxSeconds: 9}, 59 * time.Second, ""},
		{policy.Usage{Steps: 3}, 0, "steps"},
		{policy.Usage{InputTokens: 60, OutputTokens: 40}, 0, "tokens"},
		{policy.Usage{CostUSD: 1}, 0, "cost_usd"},
		{policy.Usage{SandboxSeconds: 10}, 0, "sandbox_seconds"},
		{policy.Usage{}, time.Minute, "wall_time"},
	} {
		if got, _ := l.Over(tc.u, tc.elapsed); got != tc.want {
			t.Errorf("Over(%+v, %s) = %q, want %q", tc.u, tc.elapsed, got, tc.want)
		}
	}
	if got, _ := (policy.Limits{}).Over(policy.Usage{Steps: 1 << 30}, time.Hour); got != "" {
		t.Errorf("no limits: over %q", got)
	}
	for _, bad := range []string{
		"budgets: {session: {steps: -1}}",
		"budgets: {user_daily: {wall_time: 1h}}",
		"prices: {x: {input: -1}}",
		"budgets: {session: {wall_time: soon}}",
		"budgets: {session: {step: 3}}",
	} {
		if _, err := policy.Parse([]byte(bad)); err == nil {
			t.Errorf("policy.Parse(%q): no error", bad)
		}
	}
}
