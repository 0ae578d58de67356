package egress

import (
	"net/url"
	"strconv"
	"strings"

	"corral.dev/pkg/policy"
	"corral.dev/services/egress/internal/proxy"
)

// fetchRule names the decisions on a sandbox that prepares a workspace
// from a repository ([egressapi.Identity].Fetch).
const fetchRule = "workspace-fetch"

// judgeFetch decides t for a sandbox that may only fetch from the git
// repository at repo: the two requests of git's smart HTTP that fetch
// (the refs' advertisement, GET <repo>/info/refs, and the pack, POST
// <repo>/git-upload-pack), to the repository's scheme, host and port.
// Nothing else, whatever the policy allows: the preparation clones, and
// pushes nothing. A CONNECT to the host is intercepted, so that each
// request is judged.
func judgeFetch(repo string, t proxy.Target) proxy.Verdict {
	deny := func(why string) proxy.Verdict {
		return proxy.Verdict{Decision: policy.Deny, Rule: fetchRule, Reason: why, Known: true}
	}
	u, err := url.Parse(repo)
	if err != nil {
		return deny("the repository's URL does not parse")
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	if t.Scheme != u.Scheme || t.Host != strings.TrimSuffix(strings.ToLower(u.Hostname()), ".") || strconv.Itoa(t.Port) != port {
		return deny("preparing the workspace fetches only from " + repo)
	}
	if t.Method == "" {
		return proxy.Verdict{Decision: policy.Allow, Rule: fetchRule, Known: false}
	}
	base := strings.TrimSuffix(u.Path, "/")
	switch {
	case t.Method == "GET" && t.Path == base+"/info/refs",
		t.Method == "POST" && t.Path == base+"/git-upload-pack":
		return proxy.Verdict{Decision: policy.Allow, Rule: fetchRule, Known: true}
	}
	return deny("preparing the workspace only fetches from " + repo + " over git's smart HTTP")
}
