package egress

import (
	"corral.dev/pkg/egressapi"
	"corral.dev/pkg/policy"
	"corral.dev/services/egress/internal/proxy"
)

// judge decides requests with the policy's egress rules.
type judge struct{ p *policy.Policy }

// Judge decides t for a sandbox of id. See [proxy.Judge].
func (j judge) Judge(id egressapi.Identity, t proxy.Target) proxy.Verdict {
	if id.Fetch != "" {
		return judgeFetch(id.Fetch, t)
	}
	d, known := j.p.Egress(policy.EgressRequest{
		Tenant: id.Tenant, User: id.User, Session: id.Session, Environment: id.Environment,
		Scheme: t.Scheme, Host: t.Host, Port: t.Port,
		// A tunnel being judged shows no method and path yet.
		Visible: t.Method != "", Method: t.Method, Path: t.Path,
	})
	return proxy.Verdict{Decision: d.Decision, Rule: d.Rule, Reason: d.Reason, Known: known}
}
