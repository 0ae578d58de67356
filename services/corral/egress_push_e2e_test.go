package main

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"corral.dev/pkg/egressapi"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/upstreamtest"
)

// A git push is held for a reviewer: refused at once with the approval's
// ID, approved on the reviewers' page, then the same push retried lands,
// once. A push of other refs after the approval is held again.
func TestEgressPushIsHeldUntilAReviewerApprovesIt(t *testing.T) {
	token := "ghp_" + strings.Repeat("pu5h", 8)
	up := newUpstreams(t)
	forge := upstreamtest.Git(t, up.ca, "git.example.test", token)
	forge.NewRepo(t, "app", map[string]string{"README.md": "v1\n"})
	up.add(forge.Upstream)
	const commit = "git -c user.name=Ada -c user.email=ada@example.test commit -q -am"
	p := startDev(t, byLastPrompt(map[string]string{
		"change and push": "git clone -q https://git.example.test/app.git && cd app && echo v2 > README.md && " + commit + " v2 && git push -q origin HEAD:main 2>&1; echo pushed=$?",
		"push again":      "cd app && git push -q origin HEAD:main 2>&1; echo pushed=$?",
		"push elsewhere":  "cd app && git push -q origin HEAD:elsewhere 2>&1; echo pushed=$?",
	}), up.env(t, egressPolicy))
	p.vault(t, "acme", "ada", token, "forge", "--host", "git.example.test", "--basic-user", "x-access-token")
	before := forge.Refs(t, "app")

	code, stdout, stderr := p.corral(t, "run", "--tenant", "acme", "--user", "ada", "change and push")
	if code != 0 {
		t.Fatalf("corral run exited %d: %s", code, stderr)
	}
	session := sessionOf(t, stderr).String()
	wantIn(t, "first push", stdout, "pushed=1", "held for a reviewer (approval ", "rule git-push")
	if got := forge.Refs(t, "app"); got["refs/heads/main"] != before["refs/heads/main"] {
		t.Fatalf("the held push landed: main %s -> %s", before["refs/heads/main"], got["refs/heads/main"])
	}

	// The reviewer sees what the push would do, and approves it.
	ctx := browser(t)
	page := "http://" + p.getenv("CORRAL_APPROVAL_LISTEN")
	err := chromedp.Do(ctx,
		chromedp.Navigate(page+"/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), graceToken),
		chromedp.Click(chromedp.CSS("#signin")),
		chromedp.WaitVisible(chromedp.CSS("section.pending")),
	)
	if err != nil {
		t.Fatalf("sign in: %v", err)
	}
	wantIn(t, "pending card", text(t, ctx, "section.pending"), "egress", "git-push", "POST", "https://git.example.test/app.git/git-receive-pack", "refs/heads/main")
	err = chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS("section.pending button.approve")),
		chromedp.WaitVisible(chromedp.CSS("td.status-approved")),
	)
	if err != nil {
		t.Fatalf("approve: %v", err)
	}

	// The same push, retried, lands once the decision has reached egress.
	natstest.WaitFor(t, 60*time.Second, func() error {
		_, out, _ := p.corral(t, "run", "--tenant", "acme", "--user", "ada", "--session", session, "push again")
		if !strings.Contains(out, "pushed=0") {
			return fmt.Errorf("not pushed yet: %s", out)
		}
		return nil
	})
	after := forge.Refs(t, "app")
	if after["refs/heads/main"] == before["refs/heads/main"] {
		t.Fatalf("main did not move: %v", after)
	}

	// Other refs are another push: held again, under a new approval.
	_, out, _ := p.corral(t, "run", "--tenant", "acme", "--user", "ada", "--session", session, "push elsewhere")
	wantIn(t, "altered push", out, "pushed=1", "held for a reviewer (approval ")
	if _, ok := forge.Refs(t, "app")["refs/heads/elsewhere"]; ok {
		t.Error("the push of other refs landed without an approval")
	}
}

// A sandbox speaks only for its own session: another user's vault is not
// used for it whatever it claims, it sees no other sandbox's socket, no
// control socket and no CA key, and the proxy reaches no address on the
// node.
func TestEgressSandboxSpeaksOnlyForItsSession(t *testing.T) {
	token := "ghp_" + strings.Repeat("ada0nly", 5)
	up := newUpstreams(t)
	forge := upstreamtest.Git(t, up.ca, "git.example.test", token)
	forge.NewRepo(t, "app", map[string]string{"README.md": "private\n"})
	up.add(forge.Upstream)
	var mu sync.Mutex
	commands := map[string]string{"as ada": "ls /run/corral/egress"}
	p := startDev(t, byLastPromptFunc(func(prompt string) (string, bool) {
		mu.Lock()
		defer mu.Unlock()
		cmd, ok := commands[prompt]
		return cmd, ok
	}), up.env(t, egressPolicy))
	p.vault(t, "acme", "ada", token, "forge", "--host", "git.example.test", "--basic-user", "x-access-token")
	// Ada's session has a sandbox, with a socket of its own.
	wantIn(t, "ada's sandbox", p.runOK(t, "acme", "ada", "as ada"), "egress.sock", "ca.pem")
	ada := p.startedSession(t)
	egressDir := p.data + "/egress"
	nats := strings.TrimPrefix(p.url, "nats://127.0.0.1:") // the node's own NATS server

	mu.Lock()
	commands["as bob"] = strings.Join([]string{
		"curl -sS -o /dev/null -w 'claimed ada: %{http_code}\\n' -H 'X-Corral-User: ada' -H 'X-Corral-Session: " + ada.String() + "' -H 'X-Corral-Tenant: acme' https://git.example.test/app.git/info/refs?service=git-upload-pack",
		"GIT_TERMINAL_PROMPT=0 git clone -q https://git.example.test/app.git 2>&1; echo cloned=$?",
		"ls -a /run/corral/egress; ls " + egressDir + " 2>&1; cat " + egressDir + "/ca-key.pem 2>&1",
		"python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.connect(\"" + egressDir + "/control.sock\")' 2>&1 | tail -1",
		"curl -sS -m 5 --noproxy '' -x " + egressapi.ProxyURL + " -o /dev/null -w 'node: %{http_code}\\n' http://127.0.0.1:" + nats + "/ 2>&1",
		"curl -sS -m 5 --noproxy '' -x " + egressapi.ProxyURL + " -o /dev/null -w 'localhost: %{http_code}\\n' http://localhost:" + nats + "/ 2>&1",
		"curl -sS -m 5 --noproxy '*' https://git.example.test/ 2>&1 | tail -1",
	}, "; ")
	mu.Unlock()
	out := p.runOK(t, "acme", "bob", "as bob")
	wantIn(t, "bob's sandbox", out,
		"claimed ada: 401", "cloned=128",
		"ca.pem", "egress.sock", // its own, and nothing else
		"No such file or directory",
		"node: 403", "localhost: 403",
		"Could not resolve host",
	)
	for _, leak := range []string{"PRIVATE KEY", "control.sock\n", token} {
		if strings.Contains(out, leak) {
			t.Errorf("bob's sandbox saw %q:\n%s", leak, out)
		}
	}
	for _, a := range forge.Authorizations() {
		if strings.Contains(a, "Basic ") {
			t.Errorf("a request from bob's sandbox carried ada's token: %s", a)
		}
	}
}
