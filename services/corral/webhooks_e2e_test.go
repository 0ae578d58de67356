package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
	"corral.dev/pkg/credentialtest"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/seal"
	"corral.dev/pkg/webhookapi"
	"corral.dev/services/gateway"
)

// hookPost is one POST a webhook receiver took.
type hookPost struct {
	id      string
	payload webhookapi.Payload
	signed  bool
}

// hookReceiver records the POSTs it takes, each checked against the
// webhook's secret by its own verifier (Standard Webhooks: the HMAC-SHA256
// of "id.timestamp.body", keyed with the base64 after "whsec_").
type hookReceiver struct {
	*httptest.Server
	mu     sync.Mutex
	secret string
	posts  []hookPost
}

func newHookReceiver(t *testing.T) *hookReceiver {
	r := &hookReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		p := hookPost{id: req.Header.Get("webhook-id")}
		_ = json.Unmarshal(body, &p.payload)
		r.mu.Lock()
		defer r.mu.Unlock()
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(r.secret, "whsec_"))
		if err == nil {
			mac := hmac.New(sha256.New, key)
			fmt.Fprintf(mac, "%s.%s.%s", p.id, req.Header.Get("webhook-timestamp"), body)
			p.signed = hmac.Equal([]byte(req.Header.Get("webhook-signature")), []byte("v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil))))
		}
		r.posts = append(r.posts, p)
	}))
	t.Cleanup(r.Close)
	return r
}

// got returns the POSTs taken so far.
func (r *hookReceiver) got() []hookPost {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]hookPost(nil), r.posts...)
}

// idleOf waits for the session.idle POST of session, and returns it.
func (r *hookReceiver) idleOf(t *testing.T, session string) hookPost {
	t.Helper()
	var out hookPost
	natstest.WaitFor(t, 30*time.Second, func() error {
		for _, p := range r.got() {
			if p.payload.Type == webhookapi.EventIdle && p.payload.Data.SessionID == session {
				out = p
				return nil
			}
		}
		return fmt.Errorf("no session.idle of %s among %d POSTs", session, len(r.got()))
	})
	return out
}

var (
	hookIDRE     = regexp.MustCompile(`wh_[0-9a-f]{32}`)
	hookSecretRE = regexp.MustCompile(`whsec_\S+`)
)

// TestWebhooksSurviveAGatewayKill runs the gateway in a process of its own
// under deploy/nats.conf, its webhooks managed with corral webhooks: a
// user's credential lists them but may not add one, a reviewer's adds and
// tests one. A session's end of turn is posted; the gateway is killed
// (SIGKILL), a second session ends while it is down, and once it is
// started again that one is posted too: each event once, signed, and the
// deliveries list them.
func TestWebhooksSurviveAGatewayKill(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "gateway")
	if out, err := exec.Command(goBin, "build", "-o", bin, "corral.dev/services/gateway/cmd/gateway").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	d := startDeployment(t, byPrompt(map[string][]modeltest.Call{"first": nil, "second": nil}), nil)
	p, ctx := d.platform, context.Background()
	if err := gateway.Setup(ctx, d.admin); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(t.TempDir(), "gateway.log"))
	if err != nil {
		t.Fatal(err)
	}
	// The same key across restarts: the webhooks' secrets are sealed with
	// it.
	hookKey := seal.NewKey()
	startGateway := func() *exec.Cmd {
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(), "CORRAL_NATS_URL="+d.url, "CORRAL_LOG_LEVEL=debug",
			"CORRAL_NATS_USER="+credential.UserGateway, "CORRAL_NATS_PASSWORD="+password(credential.UserGateway),
			"CORRAL_GATEWAY_WEBHOOK_KEY="+hookKey,
			// The receiver is on loopback.
			"CORRAL_WEBHOOK_ALLOW_PRIVATE=on", "CORRAL_WEBHOOK_RETRY_DELAY=200ms")
		cmd.Stdout, cmd.Stderr = logFile, logFile
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	gw := startGateway()
	recv := newHookReceiver(t)

	// A user's credential lists the webhooks, and may not add one.
	c, secret := credentialtest.Issue(t, d.admin, "acme", "bob", credential.RoleUser)
	user := *p
	user.getenv = func(k string) string {
		switch k {
		case "CORRAL_NATS_USER":
			return c.ID
		case "CORRAL_NATS_PASSWORD":
			return secret
		case "CORRAL_USER":
			return "bob"
		}
		return p.getenv(k)
	}
	if code, _, stderr := user.corral(t, "webhooks", "add", recv.URL); code == 0 || !strings.Contains(stderr, "reviewer") {
		t.Errorf("a user's corral webhooks add: exit %d, %s", code, stderr)
	}
	wantIn(t, "a user's corral webhooks ls", user.corralOK(t, "webhooks", "ls"), "No webhooks")

	// A reviewer's adds one, and tests it.
	out := p.corralOK(t, "webhooks", "add", recv.URL+"/corral", "--event", webhookapi.EventIdle)
	id, hookSecret := hookIDRE.FindString(out), hookSecretRE.FindString(out)
	if id == "" || hookSecret == "" {
		t.Fatalf("corral webhooks add printed no ID or secret:\n%s", out)
	}
	recv.mu.Lock()
	recv.secret = hookSecret
	recv.mu.Unlock()
	wantIn(t, "corral webhooks ls", user.corralOK(t, "webhooks", "ls"), id, recv.URL+"/corral", webhookapi.EventIdle)
	wantNotIn(t, "corral webhooks ls", p.corralOK(t, "webhooks", "ls", "--json"), hookSecret)
	wantIn(t, "corral webhooks test", p.corralOK(t, "webhooks", "test", id), "delivered")

	// A session's end of turn is posted; then the gateway is killed.
	first := sessionOf(t, runStderr(t, p, "first"))
	recv.idleOf(t, first.String())
	drained(t, d)
	if err := gw.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = gw.Wait()
	second := sessionOf(t, runStderr(t, p, "second"))
	startGateway()
	recv.idleOf(t, second.String())
	drained(t, d)

	seen := map[string]int{}
	for _, post := range recv.got() {
		seen[post.id]++
		if !post.signed {
			t.Errorf("POST %s (%s) is not signed with the webhook's secret", post.id, post.payload.Type)
		}
		if post.payload.Tenant != "acme" {
			t.Errorf("POST %s is of tenant %q", post.id, post.payload.Tenant)
		}
	}
	if len(seen) != 3 {
		t.Errorf("%d messages posted, want the test and two ends of turn: %v", len(seen), seen)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("message %s posted %d times, want once", id, n)
		}
	}
	deliveries := user.corralOK(t, "webhooks", "deliveries", "--json")
	if n := strings.Count(deliveries, `"outcome":"delivered"`); n != 3 {
		t.Errorf("corral webhooks deliveries lists %d delivered, want 3:\n%s", n, deliveries)
	}
	wantIn(t, "corral webhooks deliveries", deliveries, first.String(), second.String(), webhookapi.EventTest)
}

// runStderr runs prompt as ada of acme, and returns what corral run wrote on
// stderr (which names the session).
func runStderr(t *testing.T, p *platform, prompt string) string {
	t.Helper()
	code, _, stderr := p.corral(t, "run", "--tenant", "acme", "--user", "ada", prompt)
	if code != 0 {
		t.Fatalf("corral run %q exited %d\n%s", prompt, code, stderr)
	}
	return stderr
}

// drained waits until the gateway's webhook consumer has acknowledged
// every event: none is posted again after a kill.
func drained(t *testing.T, d *deployment) {
	t.Helper()
	natstest.WaitFor(t, 20*time.Second, func() error {
		c, err := d.admin.Consumer(context.Background(), bus.StreamEvents, bus.ConsumerGatewayWebhooks)
		if err != nil {
			return err
		}
		info, err := c.Info(context.Background())
		if err != nil {
			return err
		}
		if info.NumAckPending != 0 || info.NumPending != 0 {
			return fmt.Errorf("%d events unacknowledged, %d not delivered", info.NumAckPending, info.NumPending)
		}
		return nil
	})
}
