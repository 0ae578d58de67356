// Package policy decides what the agent may do: which tool calls run, and
// where a sandbox may connect. A policy is data: ordered rules, per tenant
// and for all tenants, each a CEL expression deciding allow, approve (a
// person must approve) or deny, with a reason. The first rule whose
// condition holds, a tenant's own before the common ones, decides. A
// condition that fails to evaluate (an argument it reads is missing, say)
// does not hold.
//
// # Tool rules
//
// Tool rules (rules: in the file) judge the agent's tool calls; a call no
// rule matches is allowed. A condition sees these variables:
//
//	tool    string  the tool's name: "Bash", "Read", "Write", "Edit", "Glob", "Grep"
//	args    map     the call's arguments as the model gave them
//	path    string  the routed path: the file or directory the call acts
//	                on, absolute ("/workspace/...", "/memories/...",
//	                "/memories/private/<user>/...", "/skills/..."), or ""
//	                for Bash
//	tenant  string  the session's tenant
//	user    string  the session's user
//
// For example:
//
//	tool == "Bash" && args.command.matches("rm -rf|ssh")
//	tool in ["Write", "Edit"] && path.startsWith("/skills/")
//
// # Egress rules
//
// Egress rules (egress:) judge the requests a sandbox sends out through
// the egress service, its only way to the network. A request no rule
// allows is refused, and a tenant whose rules allow nothing gets no
// network at all ([Policy.Networked]). A condition sees these variables:
//
//	host         string  the host, lowercase, without the port or a trailing dot
//	port         int     the port
//	scheme       string  "http" or "https"
//	method       string  the request's method: "GET", "POST", ...
//	path         string  the request's path, decoded, without the query
//	tenant       string  the session's tenant
//	user         string  the session's user
//	session      string  the session's ID
//	environment  string  the session's environment, "" for none
//
// Method and path are known only once the egress service reads the request
// itself: plain HTTP, or HTTPS whose TLS it terminates. Of a tunnel it
// knows only the host and port, so a rule whose outcome turns on method or
// path cannot decide it yet; [Policy.Egress] says so, and the service looks
// inside the connection and asks again.
//
// A rule may name presets, the hosts of a package registry or a service
// ([Presets]): it then holds only for a request to one of those hosts on
// port 80 or 443 and, if it has a condition as well, only when that holds
// too. A rule needs a condition, presets or both. For example:
//
//	egress:
//	  - name: git-push
//	    when: method == "POST" && path.endsWith("/git-receive-pack")
//	    decision: approve
//	    reason: a git push publishes code; a reviewer approves it
//	tenants:
//	  acme:
//	    egress:
//	      - name: packages
//	        presets: [pypi, npm, go]
//	        decision: allow
package policy

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"github.com/google/cel-go/cel"
	"gopkg.in/yaml.v3"

	"corral.dev/pkg/tool"
)

// Decisions a rule can make.
const (
	Allow   = "allow"
	Approve = "approve"
	Deny    = "deny"
)

// File is a policy file as written.
type File struct {
	// Rules apply to every tenant, after the tenant's own.
	Rules []Rule `yaml:"rules"`
	// Egress rules apply to every tenant's requests, after the tenant's own.
	Egress []EgressRule `yaml:"egress"`
	// Tenants holds each tenant's own rules and egress rules, tried first,
	// and budgets.
	Tenants map[string]struct {
		Rules   []Rule       `yaml:"rules"`
		Egress  []EgressRule `yaml:"egress"`
		Budgets Budgets      `yaml:"budgets"`
	} `yaml:"tenants"`
	// Budgets cap every tenant's spending, unless its own say otherwise.
	Budgets Budgets `yaml:"budgets"`
	// Prices are what each model costs, by its full name
	// ("openai:gpt-4.1"), "*" for any other.
	Prices map[string]Price `yaml:"prices"`
}

// Rule is one rule of a policy.
type Rule struct {
	Name     string `yaml:"name"`
	When     string `yaml:"when"`
	Decision string `yaml:"decision"`
	Reason   string `yaml:"reason"`
}

// Decision is what a policy says of a call or a request, and which rule
// said it ("" when none matched).
type Decision struct {
	Decision string `json:"decision"`
	Rule     string `json:"rule,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// Policy is a compiled policy, safe for concurrent use.
type Policy struct {
	common        []compiled
	tenants       map[string][]compiled
	egress        []egressCompiled
	tenantEgress  map[string][]egressCompiled
	budgets       Budgets
	tenantBudgets map[string]Budgets
	prices        map[string]Price
}

type compiled struct {
	Rule
	prg cel.Program
}

// Call is what a policy decides on.
type Call struct {
	Tenant string
	User   string
	Tool   string
	Input  json.RawMessage
}

var env = func() *cel.Env {
	e, err := cel.NewEnv(
		cel.Variable("tool", cel.StringType),
		cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("path", cel.StringType),
		cel.Variable("tenant", cel.StringType),
		cel.Variable("user", cel.StringType),
	)
	if err != nil {
		panic(err)
	}
	return e
}()

// Parse compiles a policy file's contents. Errors name the rule and say
// what is wrong with it.
func Parse(data []byte) (*Policy, error) {
	var f File
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) { // empty: no rules
		return nil, fmt.Errorf("policy: %w", err)
	}
	p := &Policy{
		tenants: make(map[string][]compiled), tenantEgress: make(map[string][]egressCompiled),
		tenantBudgets: make(map[string]Budgets), budgets: f.Budgets, prices: f.Prices,
	}
	var err error
	if p.common, err = compile("rules", f.Rules); err != nil {
		return nil, err
	}
	if p.egress, err = compileEgress("egress", f.Egress); err != nil {
		return nil, err
	}
	if err := checkBudgets("budgets", f.Budgets); err != nil {
		return nil, err
	}
	for t, tr := range f.Tenants {
		if p.tenants[t], err = compile("tenants."+t, tr.Rules); err != nil {
			return nil, err
		}
		if p.tenantEgress[t], err = compileEgress("tenants."+t+".egress", tr.Egress); err != nil {
			return nil, err
		}
		if err := checkBudgets("tenants."+t+".budgets", tr.Budgets); err != nil {
			return nil, err
		}
		p.tenantBudgets[t] = tr.Budgets
	}
	for m, pr := range f.Prices {
		// A NaN price would make every cost NaN, which reaches no cap.
		if pr.Input < 0 || pr.Output < 0 || !finite(pr.Input) || !finite(pr.Output) {
			return nil, fmt.Errorf("policy: prices.%s: a price must be a finite number, not negative", m)
		}
	}
	return p, nil
}

func checkBudgets(where string, b Budgets) error {
	if err := b.Session.check(where + ".session"); err != nil {
		return err
	}
	if err := b.UserDaily.check(where + ".user_daily"); err != nil {
		return err
	}
	if b.UserDaily.WallTime != 0 || b.TenantDaily.WallTime != 0 {
		return fmt.Errorf("policy: %s: wall_time caps sessions only", where)
	}
	return b.TenantDaily.check(where + ".tenant_daily")
}

// Load reads and compiles a policy file.
func Load(file string) (*Policy, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	p, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return p, nil
}

// FromEnv returns the policy the file CORRAL_POLICY_FILE holds, or the
// built-in default ([Default]) when it is unset: what every service that
// applies the policy reads. Errors name the variable.
func FromEnv(getenv func(string) string) (*Policy, error) {
	f := getenv("CORRAL_POLICY_FILE")
	if f == "" {
		return Default(), nil
	}
	p, err := Load(f)
	if err != nil {
		return nil, fmt.Errorf("CORRAL_POLICY_FILE: %w", err)
	}
	return p, nil
}

func compile(where string, rules []Rule) ([]compiled, error) {
	out := make([]compiled, 0, len(rules))
	for i, r := range rules {
		r.Name = ruleName(where, i, r.Name)
		if err := checkDecision(r); err != nil {
			return nil, err
		}
		prg, err := program(env, r)
		if err != nil {
			return nil, err
		}
		out = append(out, compiled{Rule: r, prg: prg})
	}
	return out, nil
}

// ruleName is a rule's name, or where it stands in the file when it has
// none ("tenants.acme.egress[2]").
func ruleName(where string, i int, name string) string {
	if name == "" {
		return fmt.Sprintf("%s[%d]", where, i)
	}
	return name
}

func checkDecision(r Rule) error {
	switch r.Decision {
	case Allow, Approve, Deny:
		return nil
	}
	return fmt.Errorf("policy: rule %s: decision %q: want allow, approve or deny", r.Name, r.Decision)
}

// program compiles the condition of rule r in e, which must be a bool.
func program(e *cel.Env, r Rule, opts ...cel.ProgramOption) (cel.Program, error) {
	ast, iss := e.Compile(r.When)
	if iss.Err() != nil {
		return nil, fmt.Errorf("policy: rule %s: %w", r.Name, iss.Err())
	}
	if ast.OutputType() != cel.BoolType {
		return nil, fmt.Errorf("policy: rule %s: condition is %s, want a bool", r.Name, ast.OutputType())
	}
	prg, err := e.Program(ast, opts...)
	if err != nil {
		return nil, fmt.Errorf("policy: rule %s: %w", r.Name, err)
	}
	return prg, nil
}

// Decide returns the decision of the first rule, the tenant's first, whose
// condition holds for c. A condition that fails to evaluate (an argument it
// reads is missing, say) does not hold. Arguments that are not a JSON
// object are seen as no arguments.
func (p *Policy) Decide(c Call) Decision {
	var args map[string]any
	if json.Unmarshal(c.Input, &args) != nil || args == nil {
		args = map[string]any{}
	}
	vars := map[string]any{
		"tool": c.Tool, "args": args, "path": RoutedPath(c.Tool, args, c.User),
		"tenant": c.Tenant, "user": c.User,
	}
	for _, rules := range [][]compiled{p.tenants[c.Tenant], p.common} {
		for _, r := range rules {
			out, _, err := r.prg.Eval(vars)
			if err != nil {
				continue
			}
			if hold, ok := out.Value().(bool); ok && hold {
				return Decision{Decision: r.Decision, Rule: r.Name, Reason: r.Reason}
			}
		}
	}
	return Decision{Decision: Allow}
}

// RoutedPath is the path a call acts on as a policy sees it: absolute, and
// for a private memory with its user made explicit.
func RoutedPath(toolName string, args map[string]any, user string) string {
	field := "file_path"
	switch toolName {
	case tool.Bash:
		return ""
	case tool.Glob, tool.Grep:
		field = "path"
	}
	p, _ := args[field].(string)
	if tool.IsMemoryPath(p) {
		if rest, ok := strings.CutPrefix(p, tool.Private); ok && (rest == "" || rest[0] == '/') {
			return tool.Private + "/" + user + rest
		}
		return p
	}
	if p == "" {
		return tool.Workspace
	}
	if !path.IsAbs(p) {
		p = path.Join(tool.Workspace, p)
	}
	return path.Clean(p)
}

// defaultPolicy is deploy/policy.yaml (a test keeps the two the same).
//
//go:embed default.yaml
var defaultPolicy []byte

// Default returns the default policy, deploy/policy.yaml.
func Default() *Policy {
	p, err := Parse(defaultPolicy)
	if err != nil {
		panic(err) // a test parses it
	}
	return p
}
