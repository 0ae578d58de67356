package egress

import (
	"strings"
	"testing"

	"corral.dev/pkg/egressapi"
	"corral.dev/pkg/policy"
	"corral.dev/services/egress/internal/proxy"
)

func TestJudgeFetch(t *testing.T) {
	const repo = "https://git.example.com/acme/app.git"
	for _, tc := range []struct {
		name  string
		t     proxy.Target
		want  string
		known bool
	}{
		{"tunnel to the host", proxy.Target{Scheme: "https", Host: "git.example.com", Port: 443}, policy.Allow, false},
		{"refs", proxy.Target{Scheme: "https", Host: "git.example.com", Port: 443, Method: "GET", Path: "/acme/app.git/info/refs"}, policy.Allow, true},
		{"pack", proxy.Target{Scheme: "https", Host: "git.example.com", Port: 443, Method: "POST", Path: "/acme/app.git/git-upload-pack"}, policy.Allow, true},
		{"push", proxy.Target{Scheme: "https", Host: "git.example.com", Port: 443, Method: "POST", Path: "/acme/app.git/git-receive-pack"}, policy.Deny, true},
		{"another repository", proxy.Target{Scheme: "https", Host: "git.example.com", Port: 443, Method: "GET", Path: "/acme/other.git/info/refs"}, policy.Deny, true},
		{"an API of the forge", proxy.Target{Scheme: "https", Host: "git.example.com", Port: 443, Method: "GET", Path: "/api/v1/user"}, policy.Deny, true},
		{"another host", proxy.Target{Scheme: "https", Host: "pypi.org", Port: 443}, policy.Deny, true},
		{"another port", proxy.Target{Scheme: "https", Host: "git.example.com", Port: 8443}, policy.Deny, true},
		{"plain http", proxy.Target{Scheme: "http", Host: "git.example.com", Port: 80, Method: "GET", Path: "/acme/app.git/info/refs"}, policy.Deny, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := judgeFetch(repo, tc.t)
			if v.Decision != tc.want || v.Known != tc.known {
				t.Fatalf("judgeFetch(%+v) = %+v, want %s (known %v)", tc.t, v, tc.want, tc.known)
			}
		})
	}
}

// What a clone fetches, the policy must allow for the session: a denial
// or a hold for a reviewer refuses it, and a tenant with no rule for the
// forge clones nothing from it.
func TestFetchFollowsThePolicy(t *testing.T) {
	pol, err := policy.Parse([]byte(`
rules: []
tenants:
  acme:
    egress:
      - name: forge-read
        when: host == "git.example.com" && method in ["GET", "POST"] && !path.endsWith("/git-receive-pack")
        decision: allow
  initech:
    egress:
      - name: forge-held
        when: host == "git.example.com"
        decision: approve
        reason: every byte is reviewed
  globex:
    egress:
      - name: no-forge
        when: host == "git.example.com"
        decision: deny
        reason: the forge is off limits
`))
	if err != nil {
		t.Fatal(err)
	}
	j := judge{p: pol, envs: &grants{}}
	refs := proxy.Target{Scheme: "https", Host: "git.example.com", Port: 443, Method: "GET", Path: "/acme/app.git/info/refs"}
	for _, tc := range []struct {
		tenant, want, reason string
	}{
		{"acme", policy.Allow, ""},
		{"initech", policy.Deny, "cannot wait for one"},
		{"globex", policy.Deny, "the forge is off limits"},
		{"hooli", policy.Deny, "no egress rule allows git.example.com"},
	} {
		id := egressapi.Identity{Tenant: tc.tenant, User: "ada", Fetch: "https://git.example.com/acme/app.git"}
		v := j.Judge(id, refs)
		if v.Decision != tc.want || !strings.Contains(v.Reason, tc.reason) {
			t.Errorf("%s: %+v, want %s (%q)", tc.tenant, v, tc.want, tc.reason)
		}
		// Whatever the policy allows, nothing but the repository's fetch.
		other := proxy.Target{Scheme: "https", Host: "git.example.com", Port: 443, Method: "GET", Path: "/api/v3/user"}
		if v := j.Judge(id, other); v.Decision != policy.Deny {
			t.Errorf("%s: the forge's API: %+v", tc.tenant, v)
		}
	}
}
