package egress

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/egressapi"
	"corral.dev/pkg/event"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/policy"
	"corral.dev/pkg/sessionlog"
	"corral.dev/pkg/upstreamtest"
)

const testPolicy = `
tenants:
  acme:
    egress:
      - name: uploads-held
        when: host == "api.example.test" && method == "POST"
        decision: approve
        reason: uploads leave the company
      - name: api
        when: host == "api.example.test"
        decision: allow
      - name: files
        when: host == "files.example.test"
        decision: allow
  initech:
    egress:
      - name: nothing
        when: "true"
        decision: deny
        reason: initech is offline
`

// fixture is an egress service on an embedded server, with an upstream
// that answers with what it received.
type fixture struct {
	t        *testing.T
	nc       *nats.Conn
	js       jetstream.JetStream
	cfg      Config
	approval ed25519.PrivateKey
	up       *upstreamtest.Upstream
	files    *upstreamtest.Upstream
	ca       *upstreamtest.CA
	stop     func()
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	_, nc, js := natstest.Run(t)
	ctx := context.Background()
	if err := bus.Setup(ctx, js); err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Parse([]byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	pub, key, _ := ed25519.GenerateKey(nil)
	ca := upstreamtest.NewCA(t)
	up := upstreamtest.Start(t, ca, "api.example.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Seen-Authorization", r.Header.Get("Authorization"))
		fmt.Fprintf(w, "%s %s auth=%q body=%q", r.Method, r.URL.Path, r.Header.Get("Authorization"), body)
	}))
	files := upstreamtest.Start(t, ca, "files.example.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(bytes.Repeat([]byte("f"), 1000))
	}))
	dir, err := os.MkdirTemp("", "eg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	f := &fixture{t: t, nc: nc, js: js, approval: key, up: up, files: files, ca: ca, cfg: Config{
		Dir:         dir,
		Policy:      pol,
		VaultKey:    bytes.Repeat([]byte{7}, 32),
		ApprovalKey: pub,
		SystemRoots: "/etc/ssl/certs/ca-certificates.crt",
		Resolve:     map[string]string{"api.example.test": up.Addr, "files.example.test": files.Addr},
		UpstreamCA:  ca.CertPEM(),
		ControlMode: 0o600,
	}}
	f.start()
	return f
}

// start runs the service until stop, which waits for it.
func (f *fixture) start() {
	f.t.Helper()
	s, err := New(context.Background(), f.cfg, f.js, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		f.t.Fatal(err)
	}
	f.stop = natstest.Serve(f.t, s.Run)
	natstest.WaitFor(f.t, 10*time.Second, func() error {
		_, err := os.Stat(filepath.Join(f.cfg.Dir, controlName))
		return err
	})
}

func (f *fixture) control() *egressapi.Client {
	return &egressapi.Client{Socket: filepath.Join(f.cfg.Dir, controlName)}
}

// client returns an HTTP client whose proxy is the sandbox's socket in dir
// and which trusts the sandbox's CA bundle, as a sandboxed program does.
func (f *fixture) client(dir string) *http.Client {
	f.t.Helper()
	bundle, err := os.ReadFile(filepath.Join(dir, egressapi.CABundleName))
	if err != nil {
		f.t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(bundle) {
		f.t.Fatal("the CA bundle holds no certificate")
	}
	sock := filepath.Join(dir, egressapi.SocketName)
	proxy, _ := url.Parse("http://proxy")
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(proxy),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
		TLSClientConfig:   &tls.Config{RootCAs: roots},
		DisableKeepAlives: true,
	}}
}

func (f *fixture) get(c *http.Client, method, url, body string) (int, string, http.Header) {
	f.t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	resp, err := c.Do(req)
	if err != nil {
		f.t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// vault asks the vault API for op as subject's client.
func (f *fixture) vault(subject string, req egressapi.VaultRequest) (egressapi.VaultReply, string) {
	f.t.Helper()
	data, _ := json.Marshal(req)
	msg := natstest.Request(f.t, f.nc, subject, data)
	if e := msg.Header.Get("Nats-Service-Error"); e != "" {
		return egressapi.VaultReply{}, msg.Header.Get("Nats-Service-Error-Code") + " " + e
	}
	var reply egressapi.VaultReply
	if err := json.Unmarshal(msg.Data, &reply); err != nil {
		f.t.Fatal(err)
	}
	return reply, ""
}

func identity(tenant, user string) egressapi.Identity {
	return egressapi.Identity{Tenant: tenant, User: user, Session: uuid.Must(uuid.NewV7())}
}

func TestOpenGivesNetworkOnlyWhereThePolicyMayAllowAHost(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	r, err := f.control().Open(ctx, identity("initech", "ivan"))
	if err != nil || r.Network || r.Dir != "" {
		t.Errorf("open for initech = %+v, %v; want no network", r, err)
	}
	id := identity("acme", "ada")
	r, err = f.control().Open(ctx, id)
	if err != nil || !r.Network {
		t.Fatalf("open for acme = %+v, %v; want network", r, err)
	}
	for _, name := range []string{egressapi.SocketName, egressapi.CABundleName} {
		if _, err := os.Stat(filepath.Join(r.Dir, name)); err != nil {
			t.Error(err)
		}
	}
	again, err := f.control().Open(ctx, id)
	if err != nil || again.Dir != r.Dir {
		t.Errorf("opened again: %+v, %v; want the same directory %s", again, err, r.Dir)
	}
	// No one lists the sandboxes' directories.
	if fi, err := os.Stat(filepath.Dir(r.Dir)); err != nil || fi.Mode().Perm() != 0o711 {
		t.Errorf("the sockets' parent: %v, %v; want mode 0711", fi.Mode(), err)
	}
	if _, err := f.control().Open(ctx, egressapi.Identity{Tenant: "no such tenant!", Session: id.Session}); err == nil {
		t.Error("a bad tenant opened a sandbox")
	}
	if err := f.control().Close(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.Dir); !os.IsNotExist(err) {
		t.Errorf("the sandbox's directory outlived its close: %v", err)
	}
}

// A credential goes into the requests it is bound to, and what comes back
// holds it redacted; the summary of what went out is drained per call.
func TestVaultCredentialIsInjectedAndRedacted(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	const secret = "tok-0123456789abcdef"
	_, e := f.vault(egressapi.VaultSubject("acme", "ada", egressapi.OpCreate), egressapi.VaultRequest{
		Vault:  egressapi.Vault{Name: "api", Hosts: []string{"api.example.test"}, Inject: egressapi.Injection{Header: "Authorization", Prefix: "Bearer "}},
		Secret: secret,
	})
	if e != "" {
		t.Fatal(e)
	}
	ada, bob := identity("acme", "ada"), identity("acme", "bob")
	ra, err := f.control().Open(ctx, ada)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := f.control().Open(ctx, bob)
	if err != nil {
		t.Fatal(err)
	}
	code, body, hdr := f.get(f.client(ra.Dir), "GET", "https://api.example.test/who", "")
	if code != 200 || !strings.Contains(body, `auth="Bearer [REDACTED]"`) || strings.Contains(body+hdr.Get("X-Seen-Authorization"), secret) {
		t.Errorf("ada's request: %d %q (header %q); want the secret injected and redacted", code, body, hdr.Get("X-Seen-Authorization"))
	}
	if got := f.up.Authorizations(); len(got) != 1 || got[0] != "Bearer "+secret {
		t.Errorf("the upstream received %q; want ada's token", got)
	}
	// Bob's sandbox gets none of ada's vault, whatever it sends.
	req, _ := http.NewRequest("GET", "https://api.example.test/who", nil)
	req.Header.Set("X-Corral-User", "ada")
	resp, err := f.client(rb.Dir).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := f.up.Authorizations(); len(got) != 1 {
		t.Errorf("bob's request carried a credential: %q", got)
	}
	s, err := f.control().Drain(ctx, ada)
	if err != nil || s == nil || len(s.Requests) != 1 || s.Requests[0].Host != "api.example.test" || s.Requests[0].Status != 200 || s.Requests[0].Paths[0] != "/who" {
		t.Fatalf("ada's summary = %+v, %v", s, err)
	}
	if s, err := f.control().Drain(ctx, ada); err != nil || !s.Empty() {
		t.Errorf("drained twice: %+v, %v", s, err)
	}
	// The secret is sealed in the bucket.
	kv, _ := f.js.KeyValue(ctx, bus.BucketVaults)
	entry, err := kv.Get(ctx, vaultKey("acme", "ada", "api"))
	if err != nil || bytes.Contains(entry.Value(), []byte(secret)) {
		t.Errorf("the vault as kept: %v; the secret must be sealed: %s", err, entry.Value())
	}
}

func TestVaultAPI(t *testing.T) {
	f := newFixture(t)
	mine := func(op string) string { return egressapi.VaultSubject("acme", "ada", op) }
	good := egressapi.VaultRequest{Vault: egressapi.Vault{Name: "forge", Hosts: []string{"git.example.test"}, Inject: egressapi.Injection{BasicUser: "x-access-token"}}, Secret: "s3cret-one"}
	for _, tc := range []struct {
		name string
		req  egressapi.VaultRequest
		want string
	}{
		{"no host", egressapi.VaultRequest{Vault: egressapi.Vault{Name: "x", Inject: good.Inject}, Secret: "s"}, "400 invalid: vault x binds no host"},
		{"bad name", egressapi.VaultRequest{Vault: egressapi.Vault{Name: "../x", Hosts: good.Hosts, Inject: good.Inject}, Secret: "s"}, "400 invalid: name"},
		{"bad host", egressapi.VaultRequest{Vault: egressapi.Vault{Name: "x", Hosts: []string{"localhost"}, Inject: good.Inject}, Secret: "s"}, "400 invalid: host"},
		{"two injections", egressapi.VaultRequest{Vault: egressapi.Vault{Name: "x", Hosts: good.Hosts, Inject: egressapi.Injection{Header: "A", BasicUser: "u"}}, Secret: "s"}, "400 invalid"},
		{"no secret", egressapi.VaultRequest{Vault: good.Vault}, "400 invalid: the secret"},
		{"secret over lines", egressapi.VaultRequest{Vault: good.Vault, Secret: "a\r\nX-Evil: 1"}, "400 invalid: the secret"},
	} {
		if _, e := f.vault(mine(egressapi.OpCreate), tc.req); !strings.HasPrefix(e, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, e, tc.want)
		}
	}
	made, e := f.vault(mine(egressapi.OpCreate), good)
	if e != "" || made.Vault.User != "ada" || made.Vault.Version != 1 {
		t.Fatalf("create: %+v %s", made.Vault, e)
	}
	if _, e := f.vault(mine(egressapi.OpCreate), good); !strings.HasPrefix(e, "409") {
		t.Errorf("created twice: %q", e)
	}
	if _, e := f.vault(egressapi.TenantVaultSubject("acme", egressapi.OpCreate), egressapi.VaultRequest{Vault: egressapi.Vault{Name: "npm", Hosts: []string{"*.npmjs.org"}, Inject: egressapi.Injection{Header: "Authorization", Prefix: "Bearer "}}, Secret: "s3cret-two"}); e != "" {
		t.Fatal(e)
	}
	rotated, e := f.vault(mine(egressapi.OpRotate), egressapi.VaultRequest{Vault: egressapi.Vault{Name: "forge"}, Secret: "s3cret-three"})
	if e != "" || rotated.Vault.Version != 2 {
		t.Fatalf("rotate: %+v %s", rotated.Vault, e)
	}
	// Ada sees hers and the tenant's, bob the tenant's, another tenant none.
	for _, tc := range []struct{ subject, want string }{
		{mine(egressapi.OpList), "forge,npm"},
		{egressapi.VaultSubject("acme", "bob", egressapi.OpList), "npm"},
		{egressapi.VaultSubject("initech", "ada", egressapi.OpList), ""},
	} {
		ls, e := f.vault(tc.subject, egressapi.VaultRequest{})
		var names []string
		for _, v := range ls.Vaults {
			names = append(names, v.Name)
		}
		raw, _ := json.Marshal(ls)
		if e != "" || strings.Join(names, ",") != tc.want || bytes.Contains(raw, []byte("s3cret")) {
			t.Errorf("ls on %s: %s %s; want %q and no secret", tc.subject, raw, e, tc.want)
		}
	}
	if _, e := f.vault(mine(egressapi.OpRemove), egressapi.VaultRequest{Vault: egressapi.Vault{Name: "forge"}}); e != "" {
		t.Fatal(e)
	}
	if _, e := f.vault(mine(egressapi.OpRemove), egressapi.VaultRequest{Vault: egressapi.Vault{Name: "forge"}}); !strings.HasPrefix(e, "404") {
		t.Errorf("removed twice: %q", e)
	}
}

// A request the policy holds is refused with its approval's ID; once a
// signed decision approves it, the same request passes, once. A decision
// signed by anyone else, or for another request, lets nothing through.
func TestHeldRequestPassesOnceApproved(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	id := identity("acme", "ada")
	r, err := f.control().Open(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	c := f.client(r.Dir)
	code, body, hdr := f.get(c, "POST", "https://api.example.test/upload", "the report")
	approval, perr := uuid.Parse(hdr.Get("X-Corral-Egress-Approval"))
	if code != 403 || perr != nil || !strings.Contains(body, "uploads-held") {
		t.Fatalf("held request: %d %q %q", code, body, hdr.Get("X-Corral-Egress-Approval"))
	}
	logs := sessionlog.New(f.js, sessionlog.Options{Reader: "test"})
	var asked *event.ApprovalRequested
	natstest.WaitFor(t, 10*time.Second, func() error {
		en, ok, err := logs.Last(ctx, id.Tenant, id.Session, event.TypeApprovalRequested)
		if err != nil || !ok {
			return fmt.Errorf("no approval request yet: %v", err)
		}
		asked = en.Event.(*event.ApprovalRequested)
		return nil
	})
	if asked.Call != approval || asked.Tool != event.EgressTool || !strings.Contains(string(asked.Input), "https://api.example.test/upload") || asked.ArgsHash != event.ArgsHash(event.EgressTool, asked.Input) {
		t.Fatalf("asked %+v", asked)
	}
	// Asked again: the same approval, not another.
	if _, _, hdr := f.get(c, "POST", "https://api.example.test/upload", "the report"); hdr.Get("X-Corral-Egress-Approval") != approval.String() {
		t.Errorf("retried before a decision: approval %s, want %s", hdr.Get("X-Corral-Egress-Approval"), approval)
	}
	decide := func(key ed25519.PrivateKey, argsHash string, approved bool) {
		d := &event.ApprovalDecided{Header: event.NewHeader(event.TypeApprovalDecided, id.Tenant, id.Session), Call: approval, ArgsHash: argsHash, Approved: approved, Reviewer: "grace"}
		d.Sign(key)
		data, _ := json.Marshal(d)
		if _, err := f.js.Publish(ctx, sessionlog.Subject(id.Tenant, id.Session, event.TypeApprovalDecided, sessionlog.Approval), data); err != nil {
			t.Fatal(err)
		}
	}
	_, forger, _ := ed25519.GenerateKey(nil)
	decide(forger, asked.ArgsHash, true)
	decide(f.approval, event.ArgsHash(event.EgressTool, []byte(`{"method":"POST","url":"https://api.example.test/other"}`)), true)
	// Both taken by egress, and neither lets the request through.
	natstest.WaitFor(t, 10*time.Second, func() error {
		c, err := f.js.Consumer(ctx, bus.StreamEvents, bus.ConsumerEgressDecisions)
		if err != nil {
			return err
		}
		info, err := c.Info(ctx)
		if err != nil {
			return err
		}
		if info.NumPending+uint64(info.NumAckPending) != 0 || info.Delivered.Consumer < 2 {
			return fmt.Errorf("decisions not all taken yet: %+v", info)
		}
		return nil
	})
	if code, _, hdr := f.get(c, "POST", "https://api.example.test/upload", "the report"); code != 403 || hdr.Get("X-Corral-Egress-Approval") != approval.String() {
		t.Fatalf("after a forged decision and one for another request: %d, approval %s; want still held under %s", code, hdr.Get("X-Corral-Egress-Approval"), approval)
	}
	decide(f.approval, asked.ArgsHash, true)
	natstest.WaitFor(t, 10*time.Second, func() error {
		if code, body, _ := f.get(c, "POST", "https://api.example.test/upload", "the report"); code != 200 {
			return fmt.Errorf("still held: %d %s", code, body)
		}
		return nil
	})
	if got := f.up.Requests(); len(got) != 1 || got[0] != "POST /upload" {
		t.Errorf("the upstream saw %q; want the one approved upload", got)
	}
	// Once: the same request again is held anew.
	code, _, hdr = f.get(c, "POST", "https://api.example.test/upload", "the report")
	again := hdr.Get("X-Corral-Egress-Approval")
	if code != 403 || again == approval.String() {
		t.Errorf("after its one pass: %d, approval %s; want held under a new approval", code, again)
	}
	// Another body is another request, under an approval of its own.
	if code, _, hdr := f.get(c, "POST", "https://api.example.test/upload", "another report"); code != 403 || hdr.Get("X-Corral-Egress-Approval") == again {
		t.Errorf("another body: %d, approval %s; want held under another approval than %s", code, hdr.Get("X-Corral-Egress-Approval"), again)
	}
}

// A restarted service serves every open sandbox's socket again, at the
// same path, which live sandboxes have bound.
func TestRestartServesTheSameSockets(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	id := identity("acme", "ada")
	r, err := f.control().Open(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if code, _, _ := f.get(f.client(r.Dir), "GET", "https://api.example.test/a", ""); code != 200 {
		t.Fatalf("before the restart: %d", code)
	}
	f.stop()
	f.start()
	if code, body, _ := f.get(f.client(r.Dir), "GET", "https://api.example.test/b", ""); code != 200 {
		t.Fatalf("after the restart: %d %s", code, body)
	}
}

// A drain right after a call's last connection closed has all it did,
// tunnels included, which are recorded as they end.
func TestDrainWaitsForTheLastConnections(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	id := identity("acme", "ada")
	r, err := f.control().Open(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	c := f.client(r.Dir)
	for i := range 20 {
		if code, _, _ := f.get(c, "GET", "https://files.example.test/f", ""); code != 200 {
			t.Fatalf("tunnelled request: %d", code)
		}
		s, err := f.control().Drain(ctx, id)
		if err != nil || s == nil || len(s.Requests) != 1 || s.Requests[0].Method != "CONNECT" || s.Requests[0].Received < 1000 {
			t.Fatalf("drain %d after a tunnel: %+v, %v", i, s, err)
		}
	}
}
