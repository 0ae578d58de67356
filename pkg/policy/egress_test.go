package policy_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"corral.dev/pkg/policy"
)

func mustParse(tb testing.TB, yaml string) *policy.Policy {
	tb.Helper()
	p, err := policy.Parse([]byte(yaml))
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

var session = uuid.MustParse("01890a5d-ac96-774b-bcce-b302099a8057")

// tunnel is a request egress has not read: a CONNECT to host:port.
func tunnel(tenant, host string, port int) policy.EgressRequest {
	return policy.EgressRequest{Tenant: tenant, User: "ada", Session: session, Scheme: "https", Host: host, Port: port}
}

// visible is a request egress read.
func visible(tenant, method, host, path string) policy.EgressRequest {
	r := tunnel(tenant, host, 443)
	r.Visible, r.Method, r.Path = true, method, path
	return r
}

func TestEgressParseErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown preset", "egress:\n  - name: r\n    presets: [pypi, cpan]\n    decision: allow\n",
			`rule r: no preset "cpan": want one of crates, debian, github, go, npm, pypi`},
		{"bad decision", "egress:\n  - name: r\n    when: 'true'\n    decision: maybe\n", `rule r: decision "maybe"`},
		{"no decision", "egress:\n  - name: r\n    presets: [go]\n", `rule r: decision ""`},
		{"bad expression", "egress:\n  - name: r\n    when: 'host =='\n    decision: deny\n", "rule r:"},
		{"not a bool", "egress:\n  - name: r\n    when: 'port'\n    decision: deny\n", "rule r: condition is int, want a bool"},
		{"a tool rule's variable", "egress:\n  - name: r\n    when: 'tool == \"Bash\"'\n    decision: deny\n", "rule r: ERROR: <input>:1:1: undeclared reference to 'tool'"},
		{"bad regexp", "egress:\n  - name: r\n    when: 'path.matches(\"[\")'\n    decision: deny\n", "rule r:"},
		{"neither when nor presets", "egress:\n  - name: r\n    decision: allow\n", "rule r: neither a condition (when) nor presets"},
		{"empty presets", "egress:\n  - name: r\n    presets: []\n    decision: allow\n", "rule r: neither"},
		{"unnamed tenant rule", "tenants:\n  acme:\n    egress:\n      - {when: 'true', decision: allow}\n      - {presets: [npm], decision: never}\n",
			`rule tenants.acme.egress[1]: decision "never"`},
		{"unnamed common rule", "egress:\n  - decision: deny\n", "rule egress[0]: neither"},
		{"unknown field", "egress:\n  - name: r\n    hosts: [x]\n    decision: deny\n", "field hosts not found"},
		{"presets on a tool rule", "rules:\n  - name: r\n    when: 'true'\n    presets: [go]\n    decision: deny\n", "field presets not found"},
		{"egress variables in a tool rule", "rules:\n  - name: r\n    when: 'host == \"x\"'\n    decision: deny\n", "undeclared reference to 'host'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := policy.Parse([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// A preset matches its hosts exactly, or under a wildcard's suffix, on the
// web's ports; nothing that merely contains or extends a host.
func TestEgressPresets(t *testing.T) {
	t.Parallel()
	p := mustParse(t, `
egress:
  - name: registries
    presets: [pypi, github]
    decision: allow
`)
	for _, tc := range []struct {
		host  string
		port  int
		allow bool
	}{
		{"pypi.org", 443, true},
		{"files.pythonhosted.org", 443, true},
		{"pypi.org", 80, true},
		{"PyPI.org", 443, true},
		{"pypi.org.", 443, true},
		{"github.com", 443, true},
		{"objects.githubusercontent.com", 443, true},
		{"release-assets.githubusercontent.com", 443, true},
		{"a.b.githubusercontent.com", 443, true},

		{"evilpypi.org", 443, false},
		{"pypi.org.evil.com", 443, false},
		{"www.pypi.org", 443, false},
		{"pythonhosted.org", 443, false},
		{"githubusercontent.com", 443, false},
		{"evilgithubusercontent.com", 443, false},
		{"githubusercontent.com.evil.com", 443, false},
		{".githubusercontent.com", 443, false},
		{"github.com", 22, false},
		{"pypi.org", 8443, false},
		{"registry.npmjs.org", 443, false}, // npm is not named
		{"", 443, false},
	} {
		d, known := p.Egress(tunnel("acme", tc.host, tc.port))
		if got := d.Decision == policy.Allow; got != tc.allow || !known {
			t.Errorf("Egress(%s:%d) = %+v, %v; want allowed %v", tc.host, tc.port, d, known, tc.allow)
		}
	}
}

// Every preset is listed, with hosts that can match: lowercase, no port,
// a wildcard only as a leading "*.".
func TestPresets(t *testing.T) {
	t.Parallel()
	ps := policy.Presets()
	var names []string
	host := regexp.MustCompile(`^(\*\.)?[a-z0-9-]+(\.[a-z0-9-]+)+$`)
	for _, pr := range ps {
		names = append(names, pr.Name)
		if len(pr.Hosts) == 0 {
			t.Errorf("preset %s has no hosts", pr.Name)
		}
		for _, h := range pr.Hosts {
			if !host.MatchString(h) {
				t.Errorf("preset %s: host %q", pr.Name, h)
			}
		}
		// Each host is one a rule naming the preset allows.
		p := mustParse(t, "egress:\n  - presets: ["+pr.Name+"]\n    decision: allow\n")
		for _, h := range pr.Hosts {
			h = strings.Replace(h, "*", "x", 1)
			if d, _ := p.Egress(tunnel("acme", h, 443)); d.Decision != policy.Allow {
				t.Errorf("preset %s does not allow its host %s: %+v", pr.Name, h, d)
			}
		}
	}
	if want := []string{"crates", "debian", "github", "go", "npm", "pypi"}; !slices.Equal(names, want) {
		t.Errorf("presets %v, want %v", names, want)
	}
	if ps[3].Hosts[0] != "proxy.golang.org" {
		t.Errorf("go preset: %v", ps[3].Hosts)
	}
	ps[3].Hosts[0] = "evil.com" // the caller's copy
	if policy.Presets()[3].Hosts[0] != "proxy.golang.org" {
		t.Error("Presets returned the package's own slice")
	}
}

// A tenant's egress rules come before the common ones; a rule's presets
// and condition must both hold; the first rule that holds decides; no rule
// denies, saying so.
func TestEgressDecisions(t *testing.T) {
	t.Parallel()
	p := mustParse(t, `
egress:
  - name: no-uploads
    when: method in ["PUT", "POST"] && host == "files.pythonhosted.org"
    decision: deny
    reason: installs only
  - name: pypi
    presets: [pypi]
    decision: allow
  - name: internal
    when: host.endsWith(".corp.example") && port == 8080
    decision: approve
    reason: internal services need a reviewer
tenants:
  acme:
    egress:
      - name: acme-npm-reads
        presets: [npm]
        when: method == "GET"
        decision: allow
      - name: acme-no-pypi
        when: host == "pypi.org"
        decision: deny
        reason: acme mirrors pypi
`)
	for _, tc := range []struct {
		name     string
		r        policy.EgressRequest
		decision string
		rule     string
		reason   string
	}{
		{"tenant's rule first", visible("acme", "GET", "pypi.org", "/simple/"), policy.Deny, "acme-no-pypi", "acme mirrors pypi"},
		{"another tenant gets the common rule", visible("initech", "GET", "pypi.org", "/simple/"), policy.Allow, "pypi", ""},
		{"then the common rules", visible("acme", "GET", "files.pythonhosted.org", "/packages/x.whl"), policy.Allow, "pypi", ""},
		{"deny with a reason", visible("acme", "PUT", "files.pythonhosted.org", "/packages/x.whl"), policy.Deny, "no-uploads", "installs only"},
		{"preset and condition", visible("acme", "GET", "registry.npmjs.org", "/left-pad"), policy.Allow, "acme-npm-reads", ""},
		{"preset but not condition", visible("acme", "PUT", "registry.npmjs.org", "/left-pad"), policy.Deny, "", "no egress rule allows registry.npmjs.org:443"},
		{"npm is acme's alone", visible("initech", "GET", "registry.npmjs.org", "/left-pad"), policy.Deny, "", "no egress rule allows registry.npmjs.org:443"},
		{"approve", func() policy.EgressRequest {
			r := visible("acme", "GET", "wiki.corp.example", "/")
			r.Scheme, r.Port = "http", 8080
			return r
		}(), policy.Approve, "internal", "internal services need a reviewer"},
		{"no rule", visible("acme", "GET", "example.com", "/"), policy.Deny, "", "no egress rule allows example.com:443"},
		{"no rule, IPv6", tunnel("acme", "2001:db8::1", 443), policy.Deny, "", "no egress rule allows [2001:db8::1]:443"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, known := p.Egress(tc.r)
			if want := (policy.Decision{Decision: tc.decision, Rule: tc.rule, Reason: tc.reason}); d != want || !known {
				t.Errorf("Egress = %+v, %v; want %+v, true", d, known, want)
			}
		})
	}
}

// A condition sees every variable of the request, as documented.
func TestEgressVariables(t *testing.T) {
	t.Parallel()
	p := mustParse(t, `
egress:
  - name: all
    when: >-
      host == "pypi.org" && port == 8443 && scheme == "https" &&
      method == "GET" && path == "/simple/x" && tenant == "acme" &&
      user == "ada" && session == "01890a5d-ac96-774b-bcce-b302099a8057" &&
      environment == "python"
    decision: allow
  - name: no-environment
    when: environment == "" && host == "pypi.org"
    decision: approve
`)
	r := visible("acme", "GET", "PYPI.ORG.", "/simple/x")
	r.Port, r.Environment = 8443, "python"
	if d, known := p.Egress(r); d.Rule != "all" || !known {
		t.Errorf("Egress(%+v) = %+v, %v; want allowed by all", r, d, known)
	}
	r.Environment = ""
	if d, known := p.Egress(r); d.Rule != "no-environment" || !known {
		t.Errorf("Egress without an environment = %+v, %v; want approve by no-environment", d, known)
	}
}

// A rule whose outcome turns on method or path stops the search when they
// are unknown, and only then.
func TestEgressPartial(t *testing.T) {
	t.Parallel()
	p := mustParse(t, `
egress:
  - name: plain
    when: host == "x.example"
    decision: allow
  - name: github-post
    when: host == "github.com" && method == "POST"
    decision: approve
  - name: either
    when: host == "y.example" || host == "example.com" && path.startsWith("/open/")
    decision: allow
  - name: github
    presets: [github]
    when: path.startsWith("/acme/")
    decision: allow
`)
	for _, tc := range []struct {
		name     string
		r        policy.EgressRequest
		known    bool
		decision string
		rule     string
	}{
		{"host alone, tunnel", tunnel("acme", "x.example", 443), true, policy.Allow, "plain"},
		{"host alone, visible", visible("acme", "PUT", "x.example", "/"), true, policy.Allow, "plain"},
		{"method unknown", tunnel("acme", "github.com", 443), false, "", ""},
		{"method given", visible("acme", "POST", "github.com", "/acme/x.git/git-receive-pack"), true, policy.Approve, "github-post"},
		{"method given, false; then path", visible("acme", "GET", "github.com", "/acme/x"), true, policy.Allow, "github"},
		{"method given, false; then path false", visible("acme", "GET", "github.com", "/other/x"), true, policy.Deny, ""},
		// An earlier rule false for the host; a later one turns on the path.
		{"or: known true", tunnel("acme", "y.example", 443), true, policy.Allow, "either"},
		{"or: unknown", tunnel("acme", "example.com", 443), false, "", ""},
		{"or: path given", visible("acme", "GET", "example.com", "/open/x"), true, policy.Allow, "either"},
		{"or: path given, false", visible("acme", "GET", "example.com", "/closed/x"), true, policy.Deny, ""},
		// A preset's host leaves the condition to decide; another host
		// is decided without it.
		{"preset's host", tunnel("acme", "codeload.github.com", 443), false, "", ""},
		{"not a preset's host", tunnel("acme", "gitlab.com", 443), true, policy.Deny, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, known := p.Egress(tc.r)
			if known != tc.known || d.Decision != tc.decision || d.Rule != tc.rule {
				t.Errorf("Egress = %+v, %v; want %s by %q, known %v", d, known, tc.decision, tc.rule, tc.known)
			}
		})
	}
	// A condition that fails does not hold, unless it may hold once the
	// request is read.
	e := mustParse(t, `
egress:
  - name: erring
    when: int(path) > 0 || host == "z.example"
    decision: deny
`)
	for _, tc := range []struct {
		r     policy.EgressRequest
		known bool
		rule  string
	}{
		{visible("acme", "GET", "z.example", "/"), true, "erring"},
		{visible("acme", "GET", "w.example", "/"), true, ""},
		{tunnel("acme", "w.example", 443), false, ""},
	} {
		if d, known := e.Egress(tc.r); known != tc.known || d.Rule != tc.rule {
			t.Errorf("Egress(%+v) = %+v, %v; want rule %q, known %v", tc.r, d, known, tc.rule, tc.known)
		}
	}
	// The first rule that holds decides before a later one is unknown.
	q := mustParse(t, `
egress:
  - name: first
    when: host == "github.com" && port == 443
    decision: deny
  - name: later
    when: method == "GET"
    decision: allow
`)
	if d, known := q.Egress(tunnel("acme", "github.com", 443)); !known || d.Rule != "first" {
		t.Errorf("Egress = %+v, %v; want denied by first", d, known)
	}
	if _, known := q.Egress(tunnel("acme", "github.com", 22)); known {
		t.Error("first is false, later turns on the method: known")
	}
}

func TestNetworked(t *testing.T) {
	t.Parallel()
	p := mustParse(t, `
egress:
  - name: hold-pushes
    when: method == "POST"
    decision: approve
  - name: no-evil
    when: host == "evil.example"
    decision: deny
tenants:
  acme:
    egress:
      - name: packages
        presets: [pypi]
        decision: allow
  initech:
    egress:
      - name: reviewed
        when: "true"
        decision: approve
  globex:
    egress:
      - name: never
        when: tenant == "someone else"
        decision: allow
`)
	for tenant, want := range map[string]bool{
		"acme":    true,
		"initech": false, // approve rules alone give no network
		"globex":  true,  // conditions are not proven false
		"other":   false,
		"":        false,
	} {
		if got := p.Networked(tenant); got != want {
			t.Errorf("Networked(%q) = %v, want %v", tenant, got, want)
		}
	}
	q := mustParse(t, "egress:\n  - {presets: [go], decision: allow}\n")
	if !q.Networked("anyone") {
		t.Error("a common allow rule gives no network")
	}
}

// The default policy gives no tenant network, and holds a push for a
// reviewer wherever egress would see one.
func TestDefaultEgress(t *testing.T) {
	t.Parallel()
	p := policy.Default()
	for _, tenant := range []string{"acme", "default", ""} {
		if p.Networked(tenant) {
			t.Errorf("the default policy gives %q network", tenant)
		}
	}
	push := visible("acme", "POST", "github.com", "/acme/app.git/git-receive-pack")
	if d, known := p.Egress(push); !known || d.Decision != policy.Approve || d.Rule != "git-push" || d.Reason == "" {
		t.Errorf("push = %+v, %v; want approve by git-push", d, known)
	}
	if d, known := p.Egress(visible("acme", "GET", "github.com", "/acme/app.git/info/refs")); !known || d.Decision != policy.Deny || d.Rule != "" {
		t.Errorf("fetch = %+v, %v; want denied by no rule", d, known)
	}
	if _, known := p.Egress(tunnel("acme", "github.com", 443)); known {
		t.Error("a tunnel is judged without knowing whether it pushes")
	}
}

// The commented-out example of the default policy, uncommented, parses:
// it gives acme its packages and GitHub, and leaves pushes to git-push.
func TestDefaultPolicyExample(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, example, ok := strings.Cut(string(data), "\n# tenants:\n")
	if !ok {
		t.Fatal("default.yaml has no example of tenants")
	}
	var b strings.Builder
	b.WriteString(string(data) + "tenants:\n")
	for l := range strings.Lines(example) {
		b.WriteString(strings.TrimPrefix(strings.TrimPrefix(l, "#"), " "))
	}
	p := mustParse(t, b.String())
	if !p.Networked("acme") || p.Networked("initech") {
		t.Error("the example gives network to other than acme alone")
	}
	for _, tc := range []struct {
		r        policy.EgressRequest
		known    bool
		decision string
		rule     string
	}{
		{tunnel("acme", "files.pythonhosted.org", 443), true, policy.Allow, "acme-packages"},
		{tunnel("acme", "proxy.golang.org", 443), true, policy.Allow, "acme-packages"},
		{tunnel("acme", "github.com", 443), false, "", ""},
		{visible("acme", "GET", "github.com", "/acme/app.git/info/refs"), true, policy.Allow, "acme-github"},
		{visible("acme", "POST", "github.com", "/acme/app.git/git-receive-pack"), true, policy.Approve, "git-push"},
		{tunnel("initech", "files.pythonhosted.org", 443), false, "", ""}, // git-push turns on the method
		{visible("initech", "GET", "files.pythonhosted.org", "/x.whl"), true, policy.Deny, ""},
	} {
		d, known := p.Egress(tc.r)
		if known != tc.known || d.Decision != tc.decision || d.Rule != tc.rule {
			t.Errorf("Egress(%+v) = %+v, %v; want %s by %q, known %v", tc.r, d, known, tc.decision, tc.rule, tc.known)
		}
	}
}

// BenchmarkEgress decides requests as egress asks: a tunnel to a preset's
// host, a tunnel that needs a look inside, and a visible request decided
// by the default rule.
func BenchmarkEgress(b *testing.B) {
	p := mustParse(b, `
egress:
  - name: git-push
    when: method == "POST" && path.endsWith("/git-receive-pack")
    decision: approve
    reason: a git push publishes code
tenants:
  acme:
    egress:
      - name: no-evil
        when: host.endsWith(".evil.example")
        decision: deny
      - name: packages
        presets: [pypi, npm, go, crates, debian]
        decision: allow
      - name: github
        presets: [github]
        when: '!(method == "POST" && path.endsWith("/git-receive-pack"))'
        decision: allow
`)
	for _, bc := range []struct {
		name  string
		r     policy.EgressRequest
		known bool
	}{
		{"tunnel-allowed", tunnel("acme", "files.pythonhosted.org", 443), true},
		{"tunnel-unknown", tunnel("acme", "github.com", 443), false},
		{"visible-github", visible("acme", "GET", "github.com", "/acme/app.git/info/refs"), true},
		{"visible-denied", visible("acme", "GET", "example.com", "/"), true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, known := p.Egress(bc.r); known != bc.known {
					b.Fatalf("known = %v", known)
				}
			}
		})
	}
}
