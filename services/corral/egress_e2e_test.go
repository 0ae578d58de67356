package main

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"corral.dev/pkg/event"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/upstreamtest"
)

// egressPolicy lets the sandboxes of tenant acme reach the stand-in forge
// and registries and holds their pushes for a reviewer (the tenant's rules
// come first), refuses one host with a reason, and gives tenant initech
// no network at all.
const egressPolicy = `
rules: []
egress:
  - name: no-paste
    when: host == "paste.example.test"
    decision: deny
    reason: pastebins leak code
tenants:
  acme:
    egress:
      - name: git-push
        when: host == "git.example.test" && method == "POST" && path.endsWith("/git-receive-pack")
        decision: approve
        reason: a push publishes code
      - name: stand-ins
        when: host in ["git.example.test", "pypi.example.test", "npm.example.test"]
        decision: allow
`

// upstreams are the stand-ins for the outside world a test's sandboxes
// reach through egress.
type upstreams struct {
	ca    *upstreamtest.CA
	hosts map[string]string // host -> address
}

func newUpstreams(t testing.TB) *upstreams {
	return &upstreams{ca: upstreamtest.NewCA(t), hosts: make(map[string]string)}
}

func (u *upstreams) add(up *upstreamtest.Upstream) { u.hosts[up.Host] = up.Addr }

// env is what corral dev needs to reach them, under policy.
func (u *upstreams) env(t testing.TB, policy string) map[string]string {
	var resolve []string
	for h, a := range u.hosts {
		resolve = append(resolve, h+"="+a)
	}
	return map[string]string{
		"CORRAL_POLICY_FILE":             writeTemp(t, policy),
		"CORRAL_EGRESS_TEST_RESOLVE":     strings.Join(resolve, ","),
		"CORRAL_EGRESS_TEST_UPSTREAM_CA": u.ca.WriteFile(t, t.TempDir()),
	}
}

// vault makes a vault as user of tenant with corral vaults create.
func (p *platform) vault(t testing.TB, tenant, user, secret string, args ...string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args = append([]string{"vaults", "create", "--tenant", tenant, "--user", user, "--secret-file", file}, args...)
	p.corralOK(t, args...)
}

// notOnDisk fails the test if any file under dir holds secret: the
// session logs, snapshots and workspaces in the NATS store, the sandboxes'
// workspaces, egress's directory.
func notOnDisk(t *testing.T, dir string, secrets ...string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		for _, s := range secrets {
			if bytes.Contains(data, []byte(s)) {
				t.Errorf("%s holds the secret", path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A private repository clones from Bash with the tenant's vault token,
// which the forge receives and the sandbox never sees: not in its
// environment, files, git config, output, nor in the session log.
func TestEgressClonesWithATokenTheSandboxNeverSees(t *testing.T) {
	token := "ghp_" + strings.Repeat("s3cr3t", 6)
	up := newUpstreams(t)
	forge := upstreamtest.Git(t, up.ca, "git.example.test", token)
	forge.NewRepo(t, "app", map[string]string{"README.md": "hello from the forge\n"})
	up.add(forge.Upstream)
	p := startDev(t, byPrompt(map[string][]modeltest.Call{
		"clone": {
			bash("git clone -q https://git.example.test/app.git && cat app/README.md && git -C app config --list"),
			bash("env; tr '\\0' '\\n' < /proc/self/environ; cat /proc/1/environ 2>&1 | tr '\\0' '\\n'; ls -la /run/corral/egress"),
			// The forge echoes what it got: the answer comes back redacted.
			bash("git -C app fetch -q && echo fetched"),
		},
	}), up.env(t, egressPolicy))
	p.vault(t, "acme", "ada", token, "forge", "--host", "git.example.test", "--basic-user", "x-access-token")

	answer := p.runOK(t, "acme", "ada", "clone")
	wantIn(t, "answer", answer, "hello from the forge", "HTTPS_PROXY=http://127.0.0.1:3128", "SSL_CERT_FILE=/run/corral/egress/ca.pem", "egress.sock", "fetched")
	basic := base64.StdEncoding.EncodeToString([]byte("x-access-token:" + token))
	if strings.Contains(answer, token) || strings.Contains(answer, basic) {
		t.Errorf("the token reached the model:\n%s", answer)
	}
	got := false
	for _, a := range forge.Authorizations() {
		got = got || a == "Basic "+basic
	}
	if !got {
		t.Errorf("the forge never received the token: %q", forge.Authorizations())
	}
	// Nowhere on disk: not in the log, the snapshots, the workspace or
	// the git config the clone wrote.
	notOnDisk(t, p.data, token, basic)
	// The call's summary says where it went.
	var summaries []string
	for _, r := range results(p.events(t, p.startedSession(t))) {
		if r.Egress != nil {
			for _, tr := range r.Egress.Requests {
				summaries = append(summaries, fmt.Sprintf("%s %s %d", tr.Method, tr.Host, tr.Status))
			}
		}
	}
	wantIn(t, "egress summaries", strings.Join(summaries, "\n"), "GET git.example.test 200", "POST git.example.test 200")

	// Listed, never shown; rotated; removed.
	ls := p.corralOK(t, "vaults", "--tenant", "acme", "--user", "ada")
	wantIn(t, "corral vaults", ls, "forge", "ada", "git.example.test", "basic auth as x-access-token")
	if strings.Contains(ls, token) {
		t.Errorf("corral vaults shows the secret:\n%s", ls)
	}
	file := filepath.Join(t.TempDir(), "new")
	if err := os.WriteFile(file, []byte("ghp_rotated"), 0o600); err != nil {
		t.Fatal(err)
	}
	wantIn(t, "rotate", p.corralOK(t, "vaults", "rotate", "forge", "--tenant", "acme", "--user", "ada", "--secret-file", file), "version 2")
	wantIn(t, "bob's vaults", p.corralOK(t, "vaults", "ls", "--tenant", "acme", "--user", "bob"), "No vaults")
	p.corralOK(t, "vaults", "rm", "forge", "--tenant", "acme", "--user", "ada")
	wantIn(t, "after rm", p.corralOK(t, "vaults", "--tenant", "acme", "--user", "ada"), "No vaults")
}

// pip and npm install from their registries through the proxy, with no
// setting but what the sandbox is given.
func TestEgressInstallsPackagesWithPipAndNpm(t *testing.T) {
	up := newUpstreams(t)
	pkg := upstreamtest.Package{Name: "corral-hello", Version: "1.0.0", Content: "GREETING = 'hi from pypi'\n"}
	pypi := upstreamtest.PyPI(t, up.ca, "pypi.example.test", pkg)
	npm := upstreamtest.NPM(t, up.ca, "npm.example.test", upstreamtest.Package{Name: "corral-tiny", Version: "1.0.0", Content: "module.exports = 'hi from npm';\n"})
	up.add(pypi)
	up.add(npm)
	p := startDev(t, byPrompt(map[string][]modeltest.Call{
		"install": {
			bash("PIP_DISABLE_PIP_VERSION_CHECK=1 python3 -m pip install -q --no-deps --index-url https://pypi.example.test/simple --target py corral-hello 2>&1 && PYTHONPATH=py python3 -c 'import corral_hello; print(corral_hello.GREETING)'"),
			bash("npm install --no-audit --no-fund --registry https://npm.example.test/ corral-tiny 2>&1 | tail -3 && node -e 'console.log(require(\"corral-tiny\"))'"),
		},
	}), up.env(t, egressPolicy))
	answer := p.runOK(t, "acme", "ada", "install")
	wantIn(t, "answer", answer, "hi from pypi", "hi from npm")
}

// A request no rule allows is refused, and the model reads which rule
// refused what and why; a tenant whose policy allows no host has no
// network at all, as before egress.
func TestEgressRefusalsTellTheModel(t *testing.T) {
	up := newUpstreams(t)
	p := startDev(t, byPrompt(map[string][]modeltest.Call{
		"reach out": {bash("curl -sS -m 10 http://paste.example.test/x; curl -sS -m 10 http://elsewhere.example.test/y; curl -sS -m 10 https://elsewhere.example.test/z; echo done")},
		"offline":   {bash("env | grep -ci proxy; ls /run/corral/egress 2>&1; curl -sS -m 5 http://127.0.0.1:3128 2>&1; echo done")},
	}), up.env(t, egressPolicy))

	answer := p.runOK(t, "acme", "ada", "reach out")
	wantIn(t, "answer", answer,
		"corral egress: refused by rule no-paste: pastebins leak code", // the 403's body, from the plain request
		"[egress] requests refused:",
		"GET http://paste.example.test/x: refused by rule no-paste: pastebins leak code",
		"elsewhere.example.test: no egress rule allows elsewhere.example.test:443",
		"GET http://elsewhere.example.test/y: no egress rule allows elsewhere.example.test:80",
	)
	offline := p.runOK(t, "initech", "ivan", "offline")
	wantIn(t, "answer without network", offline, "0\n", "No such file or directory", "Failed to connect")
	if strings.Contains(offline, "[egress]") {
		t.Errorf("a sandbox without network has an egress note:\n%s", offline)
	}
	// Each refusal is on the record, with the call that made it.
	var refused []string
	for _, ev := range p.eventsWhere(t, func(ev any) bool { r, ok := ev.(*event.ToolCompleted); return ok && r.Egress != nil }) {
		for _, r := range ev.(*event.ToolCompleted).Egress.Refused {
			refused = append(refused, r.Host+" "+r.Rule)
		}
	}
	wantIn(t, "refusals recorded", strings.Join(refused, "\n"), "paste.example.test no-paste", "elsewhere.example.test ")
	// And counted, by decision, never by host.
	_, metrics := getPage(t, "http://"+p.getenv("CORRAL_METRICS_LISTEN")+"/metrics")
	wantIn(t, "metrics", metrics, `corral_egress_requests_total{decision="deny",scheme="http"} 2`, `corral_egress_requests_total{decision="deny",scheme="https"} 1`)
	if strings.Contains(metrics, "example.test") {
		t.Error("a host is in the metrics")
	}
}

// byLastPrompt answers each prompt of a session, its first or a
// follow-up, with the Bash call commands gives for it, then with the
// call's result.
func byLastPrompt(commands map[string]string) modeltest.Script {
	return byLastPromptFunc(func(prompt string) (string, bool) {
		cmd, ok := commands[prompt]
		return cmd, ok
	})
}

// byLastPromptFunc is [byLastPrompt] with the commands given by command.
func byLastPromptFunc(command func(prompt string) (string, bool)) modeltest.Script {
	return func(c modeltest.Conversation) (modeltest.Turn, error) {
		i := len(c.Messages) - 1
		for i >= 0 && (c.Messages[i].Role != "user" || c.Messages[i].Text == "") {
			i--
		}
		if i < 0 {
			return modeltest.Turn{}, fmt.Errorf("no prompt")
		}
		cmd, ok := command(c.Messages[i].Text)
		if !ok {
			return modeltest.Turn{}, fmt.Errorf("no command for prompt %q", c.Messages[i].Text)
		}
		if i == len(c.Messages)-1 {
			return modeltest.Turn{Calls: []modeltest.Call{bash(cmd)}}, nil
		}
		var out []string
		for _, r := range modeltest.Results(c) {
			out = append(out, r.Content)
		}
		return modeltest.Turn{Text: "result: " + strings.Join(out, " | ")}, nil
	}
}
