package policy

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/uuid"
)

// EgressRule is one egress rule of a policy: a [Rule] that may also name
// presets, and then need not have a condition (When).
type EgressRule struct {
	Rule `yaml:",inline"`
	// Presets name sets of hosts ([Presets]): the rule holds only for a
	// request to one of them, on port 80 or 443.
	Presets []string `yaml:"presets"`
}

// EgressRequest is what an egress rule judges: a request a sandbox sends
// out, and the session it speaks for.
type EgressRequest struct {
	Tenant  string
	User    string
	Session uuid.UUID
	// Environment is the session's environment, "" for none.
	Environment string
	// Scheme is "http" or "https"; a tunnel (CONNECT) is "https".
	Scheme string
	// Host is the host, without the port. Rules see it lowercase and
	// without a trailing dot ("PyPI.org." is pypi.org).
	Host string
	Port int
	// Visible says that the egress service read the request itself (plain
	// HTTP, or HTTPS whose TLS it terminated), so that Method and Path
	// hold what it asks for. When it is false (a tunnel whose content is
	// not read) rules see method and path as unknown, and Method and Path
	// are ignored.
	Visible bool
	// Method is the request's method ("GET").
	Method string
	// Path is the request's path, decoded (a url.URL's Path), without the
	// query.
	Path string
}

// Egress decides r: the first egress rule, the tenant's first, that holds
// for r decides. When none does, r is denied, with Rule "" and a reason
// saying that no egress rule allows its host and port.
//
// known is false when a rule's outcome turns on r's method or path and r
// is not [EgressRequest.Visible]: d is then the zero Decision, and the
// caller must read the request (terminate the tunnel's TLS) and ask again
// with it visible. Rules are tried in order, so only a rule reached before
// one holds makes the decision unknown. A visible request's decision is
// always known.
func (p *Policy) Egress(r EgressRequest) (d Decision, known bool) {
	r.Host = strings.TrimSuffix(strings.ToLower(r.Host), ".")
	var vars cel.Activation = egressVars{&r}
	if !r.Visible {
		// PartialVars fails only on bindings that are not an Activation or a map.
		vars, _ = cel.PartialVars(vars, unknownRequest...)
	}
	for _, rules := range [2][]egressCompiled{p.tenantEgress[r.Tenant], p.egress} {
		for i := range rules {
			switch hold, sure := rules[i].holds(vars, r.Host, r.Port); {
			case !sure:
				return Decision{}, false
			case hold:
				return Decision{Decision: rules[i].Decision, Rule: rules[i].Name, Reason: rules[i].Reason}, true
			}
		}
	}
	reason := "no egress rule allows " + net.JoinHostPort(r.Host, strconv.Itoa(r.Port))
	return Decision{Decision: Deny, Reason: reason}, true
}

// Networked reports whether some egress rule that applies to tenant (its
// own and the common ones) allows requests: a tenant with none gets no
// network at all. Only allow rules count: an approve rule alone (the
// default git-push) holds requests the tenant could not send anyway. No
// condition is evaluated, so a rule that never holds for tenant (when:
// tenant == "other") still counts.
func (p *Policy) Networked(tenant string) bool {
	for _, rules := range [2][]egressCompiled{p.tenantEgress[tenant], p.egress} {
		for _, r := range rules {
			if r.Decision == Allow {
				return true
			}
		}
	}
	return false
}

type egressCompiled struct {
	EgressRule
	hosts *hostSet    // of the presets; nil: any host
	prg   cel.Program // nil: no condition
}

// holds reports whether the rule holds for the request whose variables
// are vars, and host and port; known is false when that turns on unknown
// variables. A condition that fails to evaluate does not hold.
func (c *egressCompiled) holds(vars cel.Activation, host string, port int) (hold, known bool) {
	if c.hosts != nil && !c.hosts.Match(host, port) {
		return false, true
	}
	if c.prg == nil {
		return true, true
	}
	out, _, err := c.prg.Eval(vars)
	switch {
	case types.IsUnknown(out):
		return false, false
	case err != nil:
		return false, true
	}
	b, ok := out.Value().(bool)
	return ok && b, true
}

var egressEnv = func() *cel.Env {
	e, err := cel.NewEnv(
		cel.Variable("host", cel.StringType),
		cel.Variable("port", cel.IntType),
		cel.Variable("scheme", cel.StringType),
		cel.Variable("method", cel.StringType),
		cel.Variable("path", cel.StringType),
		cel.Variable("tenant", cel.StringType),
		cel.Variable("user", cel.StringType),
		cel.Variable("session", cel.StringType),
		cel.Variable("environment", cel.StringType),
	)
	if err != nil {
		panic(err)
	}
	return e
}()

// unknownRequest are the variables a request that is not visible leaves
// unknown.
var unknownRequest = []*cel.AttributePatternType{cel.AttributePattern("method"), cel.AttributePattern("path")}

// egressVars are a request's variables, resolved as a rule reads them.
type egressVars struct{ r *EgressRequest }

func (v egressVars) ResolveName(name string) (any, bool) {
	r := v.r
	switch name {
	case "host":
		return types.String(r.Host), true
	case "port":
		return types.Int(r.Port), true
	case "scheme":
		return types.String(r.Scheme), true
	case "method":
		return types.String(r.Method), r.Visible
	case "path":
		return types.String(r.Path), r.Visible
	case "tenant":
		return types.String(r.Tenant), true
	case "user":
		return types.String(r.User), true
	case "session":
		return types.String(r.Session.String()), true
	case "environment":
		return types.String(r.Environment), true
	}
	return nil, false
}

func (egressVars) Parent() cel.Activation { return nil }

func compileEgress(where string, rules []EgressRule) ([]egressCompiled, error) {
	out := make([]egressCompiled, 0, len(rules))
	for i, r := range rules {
		r.Name = ruleName(where, i, r.Name)
		if err := checkDecision(r.Rule); err != nil {
			return nil, err
		}
		c := egressCompiled{EgressRule: r}
		if len(r.Presets) > 0 {
			hs, unknown := newHostSet(r.Presets)
			if unknown != "" {
				return nil, fmt.Errorf("policy: rule %s: no preset %q: want one of %s", r.Name, unknown, strings.Join(presetNames(), ", "))
			}
			c.hosts = &hs
		}
		switch {
		case r.When != "":
			prg, err := program(egressEnv, r.Rule, cel.EvalOptions(cel.OptOptimize, cel.OptPartialEval))
			if err != nil {
				return nil, err
			}
			c.prg = prg
		case c.hosts == nil:
			return nil, fmt.Errorf("policy: rule %s: neither a condition (when) nor presets: an egress rule needs one or both", r.Name)
		}
		out = append(out, c)
	}
	return out, nil
}
