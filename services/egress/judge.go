package egress

import (
	"corral.dev/pkg/egressapi"
	"corral.dev/pkg/policy"
	"corral.dev/services/egress/internal/proxy"
)

// judge decides requests with the policy's egress rules, and then what
// the sandbox's environment allows (see environments.go).
type judge struct {
	p    *policy.Policy
	envs *grants
}

// Judge decides t for a sandbox of id. See [proxy.Judge].
func (j judge) Judge(id egressapi.Identity, t proxy.Target) proxy.Verdict {
	if id.Fetch == "" {
		return j.judge(id, t)
	}
	// A sandbox cloning a repository fetches from it alone, and only what
	// the policy (or the environment) lets the session reach: the clone
	// goes out with the session's credentials.
	v := judgeFetch(id.Fetch, t)
	if v.Decision != policy.Allow {
		return v
	}
	session := id
	session.Fetch = ""
	switch pv := j.judge(session, t); {
	case pv.Decision == policy.Approve:
		why := "the policy holds requests to " + t.Host + " for a reviewer"
		if pv.Rule != "" {
			why += " (rule " + pv.Rule + ")"
		}
		return proxy.Verdict{Decision: policy.Deny, Rule: pv.Rule, Reason: why + ": a workspace's clone cannot wait for one; let the policy allow fetching from the repository", Known: true}
	case pv.Decision == policy.Deny && pv.Known:
		why := pv.Reason
		if why == "" {
			why = "no rule of the policy allows " + t.Host + " for this session: the policy must allow fetching from the repository"
		}
		return proxy.Verdict{Decision: policy.Deny, Rule: pv.Rule, Reason: why, Known: true}
	case !pv.Known:
		v.Known = false // each request is judged again
	}
	return v
}

// judge decides t for a sandbox of id, which fetches nothing.
func (j judge) judge(id egressapi.Identity, t proxy.Target) proxy.Verdict {
	d, known := j.p.Egress(policy.EgressRequest{
		Tenant: id.Tenant, User: id.User, Session: id.Session, Environment: id.Environment,
		Scheme: t.Scheme, Host: t.Host, Port: t.Port,
		// A tunnel being judged shows no method and path yet.
		Visible: t.Method != "", Method: t.Method, Path: t.Path,
	})
	v := proxy.Verdict{Decision: d.Decision, Rule: d.Rule, Reason: d.Reason, Known: known}
	if known && d.Decision == policy.Deny && d.Rule == "" {
		// No rule held: the policy's denial by default.
		if rule, ok := j.envs.allows(id, t.Host, t.Port); ok {
			v = proxy.Verdict{Decision: policy.Allow, Rule: rule, Known: true}
		}
	}
	if id.Phase == egressapi.PhaseSetup && v.Decision == policy.Approve {
		// A setup runs unattended, for no session a reviewer follows.
		why := "an environment's setup cannot wait for a reviewer: the policy must allow what it fetches"
		if v.Reason != "" {
			why = v.Reason + "; " + why
		}
		v = proxy.Verdict{Decision: policy.Deny, Rule: v.Rule, Reason: why, Known: true}
	}
	return v
}
