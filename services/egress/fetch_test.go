package egress

import (
	"testing"

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
