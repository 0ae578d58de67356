package policy

import (
	"encoding/json"
	"math"
	"os"
	"reflect"
	"testing"

	"corral.dev/pkg/model"
)

// FuzzParse checks that a policy Parse accepts caps and prices with
// finite, non-negative numbers (a NaN cap is no cap: every comparison
// with it is false), decides every call with one of its three decisions,
// and decides every egress request with one of them too, or says it needs
// the request read: never once it was read, and never allowing a tenant
// it gives no network.
func FuzzParse(f *testing.F) {
	deploy, err := os.ReadFile("../../deploy/policy.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(deploy)
	f.Add([]byte(""))
	f.Add([]byte("rules:\n  - name: no-push\n    when: tool == \"Bash\" && args.command.matches(\"git push\")\n    decision: deny\n    reason: no\n"))
	f.Add([]byte("tenants:\n  acme:\n    rules:\n      - when: path.startsWith(\"/skills/\")\n        decision: approve\n    budgets:\n      session: {steps: 3, wall_time: 1m}\n"))
	f.Add([]byte("budgets:\n  session: {tokens: 1000, cost_usd: 0.5, sandbox_seconds: 60}\nprices:\n  \"*\": {input: 3, output: 15}\n"))
	f.Add([]byte("rules:\n  - when: 1\n    decision: allow\n"))
	f.Add([]byte("egress:\n  - name: git-push\n    when: method == \"POST\" && path.endsWith(\"/git-receive-pack\")\n    decision: approve\n  - presets: [pypi, github]\n    decision: allow\n"))
	f.Add([]byte("tenants:\n  acme:\n    egress:\n      - presets: [npm]\n        when: method == \"GET\" || host.endsWith(\".example\")\n        decision: allow\n      - when: int(path) > 1\n        decision: deny\n"))
	calls := []Call{
		{Tenant: "acme", User: "alice", Tool: "Bash", Input: json.RawMessage(`{"command":"git push"}`)},
		{Tenant: "acme", User: "alice", Tool: "Write", Input: json.RawMessage(`{"file_path":"/skills/x/SKILL.md","content":""}`)},
		{Tenant: "initech", Tool: "Read", Input: json.RawMessage(`"not an object"`)},
	}
	requests := []EgressRequest{
		{Tenant: "acme", User: "alice", Scheme: "https", Host: "github.com", Port: 443},
		{Tenant: "acme", User: "alice", Scheme: "https", Host: "GitHub.com.", Port: 443, Visible: true, Method: "POST", Path: "/a/b.git/git-receive-pack"},
		{Tenant: "initech", Scheme: "http", Host: "files.pythonhosted.org", Port: 80, Visible: true, Method: "GET", Path: "/"},
		{Tenant: "initech", Scheme: "https", Host: "::1", Port: 22},
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		if err != nil {
			return
		}
		for _, c := range calls {
			switch d := p.Decide(c); d.Decision {
			case Allow, Approve, Deny:
			default:
				t.Fatalf("policy %q decides %+v on %+v", data, d, c)
			}
		}
		for _, r := range requests {
			d, known := p.Egress(r)
			switch {
			case !known && (r.Visible || d != Decision{}):
				t.Fatalf("policy %q decides %+v, unknown, on %+v", data, d, r)
			case !known:
			case d.Decision == Allow && !p.Networked(r.Tenant):
				t.Fatalf("policy %q allows %+v, but gives %q no network", data, r, r.Tenant)
			case d.Decision != Allow && d.Decision != Approve && d.Decision != Deny:
				t.Fatalf("policy %q decides %+v on %+v", data, d, r)
			}
		}
		tenants := []string{"", "acme"}
		for tn := range p.tenantBudgets {
			tenants = append(tenants, tn)
		}
		for _, tn := range tenants {
			b := p.Budgets(tn)
			for _, l := range []Limits{b.Session, b.UserDaily, b.TenantDaily} {
				if !capped(l.CostUSD) || !capped(l.SandboxSeconds) || l.Steps < 0 || l.Tokens < 0 || l.WallTime < 0 {
					t.Fatalf("policy %q gives tenant %q the caps %+v", data, tn, l)
				}
			}
		}
		for name := range p.prices {
			if c := p.Cost(name, model.Usage{InputTokens: 1000, OutputTokens: 1000}); !capped(c) {
				t.Fatalf("policy %q prices %s's tokens at %v", data, name, c)
			}
		}
	})
}

// FuzzLimits checks the limits a budget raise carries, which a user
// writes: accepted limits are non-negative and read back the same.
func FuzzLimits(f *testing.F) {
	for _, s := range []string{`{}`, `{"steps":10,"tokens":100000,"cost_usd":2.5,"sandbox_seconds":600,"wall_time":"2h0m0s"}`,
		`{"steps":-1}`, `{"wall_time":"-5m"}`, `{"wall_time":"1e9h"}`, `{"cost_usd":1e309}`, `{"unknown":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var l Limits
		if err := json.Unmarshal(data, &l); err != nil {
			return
		}
		if !capped(l.CostUSD) || !capped(l.SandboxSeconds) || l.Steps < 0 || l.Tokens < 0 || l.WallTime < 0 {
			t.Fatalf("limits %q read as %+v", data, l)
		}
		out, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		var again Limits
		if err := json.Unmarshal(out, &again); err != nil || !reflect.DeepEqual(again, l) {
			t.Fatalf("limits %q read as %+v, written as %s, read back as %+v, %v", data, l, out, again, err)
		}
	})
}

// capped reports whether f is a number a cap or a cost may be:
// non-negative and finite.
func capped(f float64) bool { return f >= 0 && !math.IsInf(f, 0) && !math.IsNaN(f) }
