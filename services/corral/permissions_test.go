package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/approvalapi"
	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
	"corral.dev/pkg/credentialtest"
	"corral.dev/pkg/event"
	"corral.dev/pkg/memoryapi"
	"corral.dev/pkg/metrics"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/process"
	"corral.dev/pkg/sessionlog"
	"corral.dev/pkg/workspaceapi"
	"corral.dev/services/memory"
	slackbridge "corral.dev/services/slack-bridge"
)

// The users of deploy/nats.conf, with the passwords the test gives them.
var natsUsers = map[string]string{
	"harness":         "CORRAL_NATS_PASSWORD_HARNESS",
	"sandbox-manager": "CORRAL_NATS_PASSWORD_SANDBOX",
	"memory":          "CORRAL_NATS_PASSWORD_MEMORY",
	"approval":        "CORRAL_NATS_PASSWORD_APPROVAL",
	"egress":          "CORRAL_NATS_PASSWORD_EGRESS",
	"gateway":         "CORRAL_NATS_PASSWORD_GATEWAY",
	"auth":            "CORRAL_NATS_PASSWORD_AUTH",
	"admin":           "CORRAL_NATS_PASSWORD_ADMIN",
}

func password(user string) string { return "pw-of-" + user }

// callKeys are the harness's key pair for calls, as the services' settings
// give it: the harness signs with one half, the tool services verify with
// the other.
var callKeys = func() map[string]string {
	pub, key, _ := ed25519.GenerateKey(nil)
	return map[string]string{"CORRAL_CALL_SIGNING_KEY": event.EncodeKey(key), "CORRAL_CALL_PUBLIC_KEY": event.EncodeKey(pub)}
}()

// callKeyEnv returns callKeys as a process's environment lines.
func callKeyEnv() []string {
	var out []string
	for k, v := range callKeys {
		out = append(out, k+"="+v)
	}
	return out
}

// violations collects the permission violations the server reports to a
// connection.
type violations struct {
	mu   sync.Mutex
	errs []string
}

// Write keeps the log lines of a connection that report a permission
// violation.
func (v *violations) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("Permissions Violation")) {
		v.mu.Lock()
		v.errs = append(v.errs, string(p))
		v.mu.Unlock()
	}
	return len(p), nil
}

func (v *violations) seen(subject string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, e := range v.errs {
		if strings.Contains(e, subject) {
			return true
		}
	}
	return false
}

// all returns the violations reported so far.
func (v *violations) all() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.errs)
}

// connectAs connects as user; the connection is closed when the test ends,
// after the cleanups registered later (the services' shutdown) have run.
func connectAs(t testing.TB, url, user string) (jetstream.JetStream, *violations) {
	t.Helper()
	return connectWith(t, url, user, password(user))
}

// deployedConfig is deploy/nats.conf, seen from this package.
const deployedConfig = repoRoot + "/deploy/nats.conf"

// deployedServerEnv returns what deploy/nats.conf reads from its server's
// environment: every user's password (see [password]) and the public key
// of a fresh issuer of the auth service (CORRAL_AUTH_ISSUER), whose seed
// it returns too, for the auth service.
func deployedServerEnv(t testing.TB) (env map[string]string, seed string) {
	t.Helper()
	seed, public, err := credential.NewIssuer()
	if err != nil {
		t.Fatal(err)
	}
	env = map[string]string{"CORRAL_AUTH_ISSUER": public}
	for user, name := range natsUsers {
		env[name] = password(user)
	}
	return env, seed
}

// setDeployedServerEnv sets [deployedServerEnv]'s variables in this
// process's environment for the test's time, for a server run in it, and
// returns them with the issuer's seed.
func setDeployedServerEnv(t testing.TB) (env map[string]string, seed string) {
	t.Helper()
	env, seed = deployedServerEnv(t)
	for k, v := range env {
		t.Setenv(k, v)
	}
	return env, seed
}

// startDeployedServer starts deploy/nats.conf's server, with every user's
// password set and an auth service's issuer key, and returns its URL and
// the issuer's seed.
func startDeployedServer(t testing.TB) (url, seed string) {
	t.Helper()
	_, seed = setDeployedServerEnv(t)
	srv, err := bus.StartServer(bus.ServerConfig{Host: "127.0.0.1", Port: -1, StoreDir: t.TempDir(), ConfigFile: deployedConfig})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	return srv.ClientURL(), seed
}

// connectWith connects signed in as user with password (a service's, or a
// credential's, whose inbox it takes), as the services and the CLI do
// ([bus.Connect]: an operation the server refuses fails at once),
// collecting the permission violations the server reports. opts add to
// the connection's options (reconnects, say).
func connectWith(t testing.TB, url, user, pass string, opts ...nats.Option) (jetstream.JetStream, *violations) {
	t.Helper()
	v := &violations{}
	nc, err := bus.Connect(url, user, slog.New(slog.NewTextHandler(v, nil)), append([]nats.Option{bus.SignIn(user, pass)}, opts...)...)
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js, v
}

// deployment is deploy/nats.conf's server with every service running in
// this process under its own user: the harness, sandbox-manager, memory,
// auth and approval services; the Slack bridge's bucket is set up. Its platform's client (corral) signs in with
// a reviewer's credential of acme for ada.
type deployment struct {
	*platform
	key        ed25519.PrivateKey             // the approval service's signing key
	admin      jetstream.JetStream            // signed in as the admin
	js         map[string]jetstream.JetStream // each service's connection
	violations map[string]*violations         // what the server refused each service
}

// startDeployment starts a deployment whose model runs script; env adds to
// the services' settings. The services of the users in without are left
// for the test to run.
func startDeployment(t testing.TB, script modeltest.Script, env map[string]string, without ...string) *deployment {
	t.Helper()
	url, seed := startDeployedServer(t)
	fake := modeltest.New(t, script)
	_, key, _ := ed25519.GenerateKey(nil)
	vars := map[string]string{
		"OPENAI_BASE_URL": fake.URL() + "/v1", "OPENAI_API_KEY": "sk-test", "CORRAL_MODEL": "openai:gpt-test",
		"CORRAL_DATA_DIR": t.TempDir(), "CORRAL_SHUTDOWN_GRACE": "1s",
		"CORRAL_APPROVAL_SIGNING_KEY": event.EncodeKey(key),
		"CORRAL_APPROVAL_PUBLIC_KEY":  event.EncodeKey(key.Public().(ed25519.PublicKey)),
		"CORRAL_REVIEWER_TOKENS":      "grace=" + graceToken, "CORRAL_AUTH_ISSUER_SEED": seed,
		"CORRAL_TENANT": "acme", "CORRAL_USER": "ada",
	}
	maps.Copy(vars, callKeys)
	maps.Copy(vars, env)
	getenv := func(k string) string { return vars[k] }
	ctx := context.Background()
	d := &deployment{platform: &platform{url: url, getenv: getenv, model: fake, admin: bus.SignIn(credential.UserAdmin, password(credential.UserAdmin))},
		key: key, js: map[string]jetstream.JetStream{}, violations: map[string]*violations{}}
	// The streams are set up by the administrator: the services may not
	// create or change them.
	d.admin, _ = connectAs(t, url, credential.UserAdmin)
	if err := bus.Setup(ctx, d.admin); err != nil {
		t.Fatal(err)
	}
	if _, err := memory.NewKVStore(ctx, d.admin); err != nil {
		t.Fatal(err)
	}
	if _, err := slackbridge.Setup(ctx, d.admin); err != nil {
		t.Fatal(err)
	}
	client, secret := credentialtest.Issue(t, d.admin, "acme", "ada", credential.RoleReviewer)
	vars["CORRAL_NATS_USER"], vars["CORRAL_NATS_PASSWORD"] = client.ID, secret
	// Each service signs in as its own user.
	services := process.NewEnv(getenv, slog.New(slog.DiscardHandler), metrics.NewRegistry(), func(user string) (*nats.Conn, error) {
		js, v := connectAs(t, url, user)
		d.js[user], d.violations[user] = js, v
		return js.Conn(), nil
	})
	var users []string
	for _, user := range []string{credential.UserHarness, credential.UserSandbox, credential.UserMemory, credential.UserAuth, credential.UserApproval} {
		if !slices.Contains(without, user) {
			users = append(users, user)
		}
	}
	runComponents(t, services, users...)
	return d
}

// firstSession waits for the first session of tenant to start, and returns
// its ID.
func (d *deployment) firstSession(t testing.TB, tenant string) uuid.UUID {
	t.Helper()
	var session uuid.UUID
	natstest.WaitFor(t, 20*time.Second, func() error {
		msgs, err := bus.ReadAll(context.Background(), d.admin, bus.StreamEvents, "events."+tenant+".*."+event.Kind(event.TypeSessionRequested)+".>")
		if err != nil || len(msgs) == 0 {
			return fmt.Errorf("no session of %s has started: %v", tenant, err)
		}
		_, session, err = bus.ParseSubject(msgs[0].Subject)
		return err
	})
	return session
}

// TestDeployedPermissions runs every service under its own user of
// deploy/nats.conf through a session that needs an approval and a memory,
// then proves what each user may not do.
func TestDeployedPermissions(t *testing.T) {
	d := startDeployment(t, byPrompt(map[string][]modeltest.Call{
		"push and remember": {bash("echo rm -rf done"), write("/memories/release.md", "pushed\n"), read("/memories/release.md")},
	}), nil)
	p, key, ctx, url := d.platform, d.key, context.Background(), d.url
	client := credential.Credential{ID: p.getenv("CORRAL_NATS_USER")}
	secret := p.getenv("CORRAL_NATS_PASSWORD")
	hjs, sjs, mjs := d.js[credential.UserHarness], d.js[credential.UserSandbox], d.js[credential.UserMemory]
	hv, sv, mv := d.violations[credential.UserHarness], d.violations[credential.UserSandbox], d.violations[credential.UserMemory]

	// The whole flow works under these permissions.
	run := p.runBackground(t, "acme", "push and remember")
	id, _ := p.pending(t, "acme")
	if code, _, stderr := p.corral(t, "approve", id.String()); code != 0 {
		t.Fatalf("corral approve as client: exit %d: %s", code, stderr)
	}
	r := wait(t, run)
	if r.code != 0 {
		t.Fatalf("corral run as client exited %d:\n%s", r.code, r.stderr)
	}
	wantIn(t, "answer", r.stdout, "rm -rf done", "pushed")
	natstest.WaitFor(t, 10*time.Second, func() error {
		code, stdout, stderr := p.corral(t, "usage", "--tenant", "acme")
		if code != 0 || !strings.Contains(stdout, "ada") {
			return fmt.Errorf("corral usage as client: exit %d: %s%s", code, stdout, stderr)
		}
		return nil
	})
	for name, v := range d.violations {
		if errs := v.all(); len(errs) > 0 {
			t.Errorf("%s hit permission violations in normal work: %v", name, errs)
		}
	}

	// What each user may not do.
	session := uuid.Must(uuid.NewV7())
	decision := func() *event.ApprovalDecided {
		d := &event.ApprovalDecided{Header: event.NewHeader(event.TypeApprovalDecided, "acme", session), Call: uuid.New(), ArgsHash: strings.Repeat("0", 64), Approved: true, Reviewer: "mallory"}
		d.Sign(key) // even with the right key
		return d
	}
	cjs, cv := connectWith(t, url, client.ID, secret)
	denied := func(who string, js jetstream.JetStream, v *violations, subject string, ev any) {
		t.Helper()
		pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer pcancel()
		err := bus.Publish(pctx, js, subject, uuid.NewString(), ev)
		if err == nil {
			t.Errorf("%s published to %s", who, subject)
			return
		}
		natstest.WaitFor(t, 5*time.Second, func() error {
			if !v.seen(subject) {
				return fmt.Errorf("no permission violation reported for %s (publish error: %v)", subject, err)
			}
			return nil
		})
	}
	decided := sessionlog.Subject("acme", session, event.TypeApprovalDecided, sessionlog.Approval)
	for who, c := range map[string]struct {
		js jetstream.JetStream
		v  *violations
	}{"harness": {hjs, hv}, "sandbox-manager": {sjs, sv}, "memory": {mjs, mv}, "client": {cjs, cv}} {
		denied(who, c.js, c.v, decided, decision())
	}
	denied("sandbox-manager", sjs, sv, sessionlog.Subject("acme", session, event.TypeModelResponded, sessionlog.Harness), map[string]string{"type": event.TypeModelResponded})
	denied("sandbox-manager", sjs, sv, sessionlog.Subject("acme", session, event.TypeToolCompleted, sessionlog.Memory), map[string]string{"type": event.TypeToolCompleted})
	denied("memory", mjs, mv, sessionlog.Subject("acme", session, event.TypeToolCompleted, sessionlog.Sandbox), map[string]string{"type": event.TypeToolCompleted})
	denied("client", cjs, cv, sessionlog.Subject("acme", session, event.TypeSessionStopped, sessionlog.Harness), map[string]string{"type": event.TypeSessionStopped})
	denied("client", cjs, cv, bus.RequestSubject("initech", session, "ada"), map[string]string{"type": event.TypeRequest})
	// Uploads are written by clients alone, each in its own tenant.
	staged := bus.UploadSubject("acme", bus.UserToken("ada"), strings.Repeat("0", 64), 0)
	denied("client", cjs, cv, bus.UploadSubject("initech", bus.UserToken("ada"), strings.Repeat("0", 64), 0), "not acme's")
	denied("sandbox-manager", sjs, sv, staged, "not the client's")
	denied("harness", hjs, hv, staged, "not the client's")
	denied("sandbox-manager", sjs, sv, bus.RequestSubject("acme", session, "ada"), map[string]string{"type": event.TypeRequest})
	denied("sandbox-manager", sjs, sv, bus.ToolSubject(bus.ServiceSandbox, "acme", session), map[string]string{"type": event.TypeToolCall})
	denied("harness", hjs, hv, "$KV.approvals.acme."+session.String()+".x", map[string]string{"status": "approved"})
	// The sandbox-manager, which publishes live output, forges no pause or
	// resumption, nor an entry of the session index.
	paused := map[string]string{"type": event.TypeSessionPaused}
	denied("sandbox-manager", sjs, sv, sessionlog.Subject("acme", session, event.TypeSessionPaused, sessionlog.Harness), paused)
	denied("sandbox-manager", sjs, sv, sessionlog.Subject("acme", session, event.TypeSessionResumed, sessionlog.Harness), map[string]string{"type": event.TypeSessionResumed})
	denied("sandbox-manager", sjs, sv, "$KV."+bus.BucketSessions+".acme."+session.String(), map[string]string{"status": "completed"})
	// The gateway, as itself, writes the session index and nothing a
	// client or another service does: what it does for an API key it
	// does signed in as the key's credential.
	gjs, gv := connectAs(t, url, credential.UserGateway)
	denied("gateway", gjs, gv, decided, decision())
	denied("gateway", gjs, gv, sessionlog.Subject("acme", session, event.TypeSessionPaused, sessionlog.Harness), paused)
	denied("gateway", gjs, gv, bus.RequestSubject("acme", session, "ada"), map[string]string{"type": event.TypeRequest})
	denied("gateway", gjs, gv, "$KV."+bus.BucketGateway+".acme.agent.agent_1", map[string]string{"name": "not the client's"})
	denied("gateway", gjs, gv, bus.LiveSubject("acme", session), event.Live{Kind: event.LiveText, Text: "not the model's"})

	// No service hears another's replies: the memory service may not
	// listen on the harness's inboxes (events pulled, previews answered).
	if _, err := mjs.Conn().SubscribeSync(bus.InboxPrefix(credential.UserHarness) + ".>"); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 5*time.Second, func() error {
		if !mv.seen(bus.InboxPrefix(credential.UserHarness) + ".>") {
			return fmt.Errorf("the memory service subscribed to the harness's inboxes")
		}
		return nil
	})

	// No service can route messages around its permissions by creating or
	// changing a stream (re-publishing into the approvals bucket, say).
	short := func() context.Context {
		c, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		t.Cleanup(cancel)
		return c
	}
	republish := &jetstream.RePublish{Source: ">", Destination: "$KV.approvals.acme.x.y"}
	if _, err := sjs.CreateStream(short(), jetstream.StreamConfig{Name: "EVIL", Subjects: []string{"evil.>"}, RePublish: republish}); err == nil {
		t.Error("the sandbox-manager created a stream")
	}
	calls, err := sjs.Stream(ctx, "KV_"+bus.BucketCalls)
	if err != nil {
		t.Fatal(err)
	}
	changed := calls.CachedInfo().Config
	changed.RePublish = republish
	if _, err := sjs.UpdateStream(short(), changed); err == nil {
		t.Error("the sandbox-manager changed the calls bucket's stream")
	}
	// Nor can a client take a service's messages from its consumer.
	if _, err := cjs.CreateOrUpdateConsumer(short(), bus.StreamEvents, jetstream.ConsumerConfig{Durable: bus.ConsumerHarnessSteps}); err == nil {
		t.Error("a client changed the harness's steps consumer")
	}
	if _, err := cjs.Consumer(short(), bus.StreamEvents, bus.ConsumerHarnessSteps); err == nil {
		t.Error("a client looked up the harness's steps consumer")
	}
	if _, err := sjs.Consumer(short(), bus.StreamEvents, bus.ConsumerApprovals); err == nil {
		t.Error("the sandbox-manager looked up the approval service's consumer")
	}

	// No forged decision reached the log.
	msgs, err := bus.ReadAll(ctx, hjs, bus.StreamEvents, bus.SessionEvents("acme", session))
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 0 {
		t.Errorf("%d messages reached the log of the forged session", len(msgs))
	}
	// The sandbox-manager cannot call the memory or approval APIs, nor
	// the workspace API it answers.
	snc := sjs.Conn()
	for _, subject := range []string{memoryapi.Subject("acme", "ada", memoryapi.OpList), approvalapi.Subject("acme", "ada", bus.OpList), workspaceapi.Subject("acme", "ada", workspaceapi.OpList)} {
		_, err := snc.Request(subject, []byte(`{"tenant":"acme","path":"/memories"}`), 500*time.Millisecond)
		if err == nil {
			t.Errorf("sandbox-manager called %s", subject)
		}
		natstest.WaitFor(t, 5*time.Second, func() error {
			if !sv.seen(subject) {
				return fmt.Errorf("no permission violation reported for %s (request error: %v)", subject, err)
			}
			return nil
		})
	}
	// Sandbox-managers answer the calls other nodes forward to them; no one
	// else may send them one.
	s2, _ := connectAs(t, url, "sandbox-manager")
	sub, err := s2.Conn().Subscribe(bus.NodeSubject("perm-test"), func(m *nats.Msg) { _ = m.Respond([]byte("{}")) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	_ = s2.Conn().Flush()
	if _, err := snc.Request(bus.NodeSubject("perm-test"), []byte("{}"), 5*time.Second); err != nil {
		t.Errorf("a forwarded call got no answer from the node it went to: %v", err)
	}
	if _, err := hjs.Conn().Request(bus.NodeSubject("perm-test"), []byte("{}"), 500*time.Millisecond); err == nil {
		t.Error("the harness sent a call straight to a sandbox-manager node")
	}
	natstest.WaitFor(t, 5*time.Second, func() error {
		if !hv.seen(bus.NodeSubject("perm-test")) {
			return fmt.Errorf("no violation reported for the harness's call to a node")
		}
		return nil
	})
	// No service deletes the session logs; no client deletes a service's
	// consumer.
	if err := hjs.DeleteStream(ctx, bus.StreamEvents); err == nil {
		t.Error("the harness deleted the EVENTS stream")
	}
	if err := cjs.DeleteConsumer(ctx, bus.StreamEvents, bus.ConsumerHarnessSteps); err == nil {
		t.Error("a client deleted the harness's consumer")
	}
	natstest.WaitFor(t, 5*time.Second, func() error {
		if !cv.seen("$JS.API.CONSUMER.DELETE.EVENTS." + bus.ConsumerHarnessSteps) {
			return fmt.Errorf("no violation reported for the client's deletion")
		}
		return nil
	})
}

// TestVaultsReadableByEgressAlone puts a vault in the vaults bucket as the
// admin, then has every other service's user, a client of the vault's
// tenant and an operator try each way to read a stored message: the
// bucket's Get (its stream's info first), direct gets by subject and by
// request, a stored message get, an ordered, a push and a durable
// consumer, a pull from a consumer the admin made, and a subscription to
// the bucket's subjects while the vault is written. The server refuses
// each, and the secret never arrives; the egress service reads and
// watches it. It runs on deploy/nats.conf and on the configuration
// pkg/credential renders (corral dev's), so that it fails when the deny
// rules go from either.
func TestVaultsReadableByEgressAlone(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(testing.TB) (url, seed string)
	}{
		{"deploy/nats.conf", startDeployedServer},
		{"pkg/credential", startRenderedServer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, seed := tc.start(t)
			checkVaultsReadableByEgressAlone(t, url, seed)
		})
	}
}

// startRenderedServer starts a server on the configuration pkg/credential
// renders now, as corral dev does, with the users' passwords of
// [password] and a fresh issuer of the auth service, and returns its URL
// and the issuer's seed.
func startRenderedServer(t testing.TB) (url, seed string) {
	t.Helper()
	seed, issuer, err := credential.NewIssuer()
	if err != nil {
		t.Fatal(err)
	}
	passwords := map[string]string{}
	for _, u := range credential.AuthUsers() {
		passwords[u] = password(u)
	}
	dir := t.TempDir() // registered first, so removed after the shutdown
	conf := filepath.Join(dir, "nats.conf")
	if err := credential.WriteConfigFile(conf, passwords, issuer); err != nil {
		t.Fatal(err)
	}
	srv, err := bus.StartServer(bus.ServerConfig{Host: "127.0.0.1", Port: -1, StoreDir: dir, ConfigFile: conf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	return srv.ClientURL(), seed
}

func checkVaultsReadableByEgressAlone(t *testing.T, url, seed string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, _ := connectAs(t, url, credential.UserAdmin)
	if err := bus.Setup(ctx, admin); err != nil {
		t.Fatal(err)
	}
	startAuth(t, url, seed)
	const key = "acme.t.github"
	stream, subject := "KV_"+bus.BucketVaults, "$KV."+bus.BucketVaults+"."+key
	secret := []byte("ghp_" + uuid.NewString())
	vaults, err := admin.KeyValue(ctx, bus.BucketVaults)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := vaults.Put(ctx, key, secret); err != nil {
		t.Fatal(err)
	}
	// A durable consumer on the bucket, to pull from.
	if _, err := admin.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: "peek", AckPolicy: jetstream.AckNonePolicy}); err != nil {
		t.Fatal(err)
	}
	// What a reader got holds the secret as it is, or in base64 (a stored
	// message get answers in JSON).
	leaked := func(b []byte) bool {
		return bytes.Contains(b, secret) || bytes.Contains(b, []byte(base64.StdEncoding.EncodeToString(secret)))
	}

	// The egress service reads it, and watches the bucket.
	ejs, ev := connectAs(t, url, credential.UserEgress)
	kv, err := ejs.KeyValue(ctx, bus.BucketVaults)
	if err != nil {
		t.Fatalf("egress: open the vaults bucket: %v", err)
	}
	if e, err := kv.Get(ctx, key); err != nil || !bytes.Equal(e.Value(), secret) {
		t.Fatalf("egress: get %s: %v", key, err)
	}
	w, err := kv.Watch(ctx, key)
	if err != nil {
		t.Fatalf("egress: watch %s: %v", key, err)
	}
	select {
	case e := <-w.Updates():
		if e == nil || !bytes.Equal(e.Value(), secret) {
			t.Errorf("egress: the watch's first update is %v, want the vault", e)
		}
	case <-ctx.Done():
		t.Fatal("egress: the watch gave nothing")
	}
	_ = w.Stop()
	if errs := ev.all(); len(errs) > 0 {
		t.Errorf("egress hit permission violations reading the vaults: %v", errs)
	}

	// request sends body to subj and returns the reply's data: it fails at
	// once when the server refuses the publish.
	request := func(ctx context.Context, nc *nats.Conn, subj, body string) ([]byte, error) {
		m, err := nc.RequestWithContext(ctx, subj, []byte(body))
		if err != nil {
			return nil, err
		}
		return m.Data, nil
	}
	last := fmt.Sprintf(`{"last_by_subj":%q}`, subject)
	type attempt struct {
		name string
		mark string // the subject the server refuses, as it reports it
		read func(ctx context.Context, js jetstream.JetStream) ([]byte, error)
	}
	attempts := []attempt{
		{"the bucket's Get", "$JS.API.STREAM.INFO." + stream, func(ctx context.Context, js jetstream.JetStream) ([]byte, error) {
			kv, err := js.KeyValue(ctx, bus.BucketVaults)
			if err != nil {
				return nil, err
			}
			e, err := kv.Get(ctx, key)
			if err != nil {
				return nil, err
			}
			return e.Value(), nil
		}},
		{"a direct get by subject", "$JS.API.DIRECT.GET." + stream + "." + subject, func(ctx context.Context, js jetstream.JetStream) ([]byte, error) {
			return request(ctx, js.Conn(), "$JS.API.DIRECT.GET."+stream+"."+subject, "")
		}},
		{"a direct get by request", "$JS.API.DIRECT.GET." + stream, func(ctx context.Context, js jetstream.JetStream) ([]byte, error) {
			return request(ctx, js.Conn(), "$JS.API.DIRECT.GET."+stream, last)
		}},
		{"a stored message get", "$JS.API.STREAM.MSG.GET." + stream, func(ctx context.Context, js jetstream.JetStream) ([]byte, error) {
			return request(ctx, js.Conn(), "$JS.API.STREAM.MSG.GET."+stream, last)
		}},
		{"an ordered consumer", "$JS.API.CONSUMER.CREATE." + stream, func(ctx context.Context, js jetstream.JetStream) ([]byte, error) {
			c, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
			if err != nil {
				return nil, err
			}
			m, err := c.Next(jetstream.FetchContext(ctx))
			if err != nil {
				return nil, err
			}
			return m.Data(), nil
		}},
		{"a push consumer", "$JS.API.CONSUMER.CREATE." + stream, func(ctx context.Context, js jetstream.JetStream) ([]byte, error) {
			nc := js.Conn()
			inbox := nc.NewInbox()
			sub, err := nc.SubscribeSync(inbox)
			if err != nil {
				return nil, err
			}
			defer sub.Unsubscribe()
			cfg := fmt.Sprintf(`{"stream_name":%q,"config":{"deliver_subject":%q,"ack_policy":"none","filter_subject":%q}}`, stream, inbox, subject)
			if _, err := request(ctx, nc, "$JS.API.CONSUMER.CREATE."+stream, cfg); err != nil {
				return nil, err
			}
			m, err := sub.NextMsgWithContext(ctx)
			if err != nil {
				return nil, err
			}
			return m.Data, nil
		}},
		{"a durable consumer", "$JS.API.CONSUMER.DURABLE.CREATE." + stream + ".mine", func(ctx context.Context, js jetstream.JetStream) ([]byte, error) {
			cfg := fmt.Sprintf(`{"stream_name":%q,"config":{"durable_name":"mine","ack_policy":"none","filter_subject":%q}}`, stream, subject)
			if _, err := request(ctx, js.Conn(), "$JS.API.CONSUMER.DURABLE.CREATE."+stream+".mine", cfg); err != nil {
				return nil, err
			}
			return request(ctx, js.Conn(), "$JS.API.CONSUMER.MSG.NEXT."+stream+".mine", `{"batch":1}`)
		}},
		{"a pull from the admin's consumer", "$JS.API.CONSUMER.MSG.NEXT." + stream + ".peek", func(ctx context.Context, js jetstream.JetStream) ([]byte, error) {
			return request(ctx, js.Conn(), "$JS.API.CONSUMER.MSG.NEXT."+stream+".peek", `{"batch":1}`)
		}},
		{"a subscription while it is written", "$KV." + bus.BucketVaults + ".>", func(ctx context.Context, js jetstream.JetStream) ([]byte, error) {
			nc := js.Conn()
			sub, err := nc.SubscribeSync("$KV." + bus.BucketVaults + ".>")
			if err != nil {
				return nil, err
			}
			defer sub.Unsubscribe()
			// The server has the subscription, or has refused it, before
			// the vault is written again; and has delivered the write, if
			// anything, before the second flush returns.
			if err := nc.FlushWithContext(ctx); err != nil {
				return nil, err
			}
			if _, err := vaults.Put(ctx, key, secret); err != nil {
				t.Error(err)
			}
			if err := nc.FlushWithContext(ctx); err != nil {
				return nil, err
			}
			var got []byte
			for {
				m, err := sub.NextMsg(0)
				if err != nil {
					return got, nil
				}
				got = append(got, m.Data...)
			}
		}},
	}

	// The readers: every other service, and clients.
	type reader struct {
		name       string
		user, pass string
	}
	var readers []reader
	for _, s := range credential.Services() {
		if s.User != credential.UserEgress {
			readers = append(readers, reader{s.User, s.User, password(s.User)})
		}
	}
	for _, c := range []struct{ tenant, user string }{{"acme", "ada"}, {credential.AllTenants, "olga"}} {
		role := credential.RoleReviewer
		if c.tenant == credential.AllTenants {
			role = credential.RoleOperator
		}
		cred, secret := credentialtest.Issue(t, admin, c.tenant, c.user, role)
		readers = append(readers, reader{fmt.Sprintf("%s's %s credential", c.tenant, role), cred.ID, secret})
	}
	for _, r := range readers {
		for _, a := range attempts {
			t.Run(r.name+"/"+a.name, func(t *testing.T) {
				// A connection of its own, whose violations are this
				// attempt's.
				js, v := connectWith(t, url, r.user, r.pass)
				actx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				actx, done := bus.WhilePermitted(actx, js.Conn(), ">")
				got, err := a.read(actx, js)
				done()
				if leaked(got) {
					t.Errorf("%s read the vault by %s", r.name, a.name)
				}
				natstest.WaitFor(t, 5*time.Second, func() error {
					if !v.seen(a.mark) {
						return fmt.Errorf("the server refused nothing on %s (%v; got %q)", a.mark, err, got)
					}
					return nil
				})
			})
		}
	}
}

// TestDeployedReadsOnlyTheirStreams: egress and the memory service read
// no session's log, so they may not: neither by batched direct gets nor
// by a consumer of their own on the logs, nor the logs' large events or
// the uploads. What they do read (their buckets, their calls, the
// decisions egress hears) they still do: a session writes a memory and
// the whole flow ends with no violation in normal work.
func TestDeployedReadsOnlyTheirStreams(t *testing.T) {
	d := startDeployment(t, byPrompt(map[string][]modeltest.Call{
		"the secret plan is 42": {bash("echo TOP-SECRET-OUTPUT"), write("/memories/plan.md", "42\n")},
	}), nil)
	if r := wait(t, d.runBackground(t, "acme", "the secret plan is 42")); r.code != 0 {
		t.Fatalf("corral run exited %d:\n%s", r.code, r.stderr)
	}
	for name, v := range d.violations {
		if errs := v.all(); len(errs) > 0 {
			t.Errorf("%s hit permission violations in normal work: %v", name, errs)
		}
	}
	for _, user := range []string{credential.UserEgress, credential.UserMemory} {
		js, v := connectAs(t, d.url, user)
		// Refused, a read has no answer: it ends at its deadline.
		ctx := func() context.Context {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			t.Cleanup(cancel)
			return ctx
		}
		for _, stream := range []string{bus.StreamEvents, bus.StreamPayloads, bus.StreamUploads} {
			if msgs, _ := bus.ReadAll(ctx(), js, stream, ">"); len(msgs) > 0 {
				t.Errorf("%s read %d messages of %s", user, len(msgs), stream)
			}
		}
		if _, err := js.OrderedConsumer(ctx(), bus.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"events.>"}}); err == nil {
			t.Errorf("%s made a consumer of every session's log", user)
		}
		// Nor by its own durable, made again with a wider filter.
		own := map[string]string{credential.UserEgress: bus.ConsumerEgressDecisions, credential.UserMemory: bus.ConsumerMemoryCalls}[user]
		if _, err := js.CreateOrUpdateConsumer(ctx(), bus.StreamEvents, jetstream.ConsumerConfig{Durable: own, FilterSubject: "events.>"}); err == nil {
			t.Errorf("%s made its durable %s a consumer of every session's log", user, own)
		}
		if len(v.all()) == 0 {
			t.Errorf("%s's reads were not refused by the server", user)
		}
	}
}

// TestEveryServiceSetsUpWhatItReads: a service started on its own sets up
// the streams and buckets as it starts (bus.Join), under its own user,
// against what an administrator set up. Each checks only what it may read,
// and none is refused anything: egress and the memory service, which read
// only their own streams, and the approval service and the gateway, which
// may not read the calls, failed to start when each checked every stream.
func TestEveryServiceSetsUpWhatItReads(t *testing.T) {
	url, _ := startDeployedServer(t)
	admin, _ := connectAs(t, url, credential.UserAdmin)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := bus.Setup(ctx, admin); err != nil {
		t.Fatal(err)
	}
	for _, s := range credential.Services() {
		t.Run(s.User, func(t *testing.T) {
			js, v := connectAs(t, url, s.User)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := bus.Setup(ctx, js, bus.Reading(credential.Reads(s.User))); err != nil {
				t.Errorf("setup as %s: %v", s.User, err)
			}
			if errs := v.all(); len(errs) > 0 {
				t.Errorf("setup as %s was refused: %v", s.User, errs)
			}
		})
	}
	// The sandbox-manager reads its calls through its durable alone.
	reads := map[string]map[string]bool{
		credential.UserSandbox:  {bus.StreamEvents: true, bus.StreamTools: false, "KV_" + bus.BucketCredentials: false, "KV_" + bus.BucketVaults: false},
		credential.UserApproval: {bus.StreamEvents: true, bus.StreamTools: false},
		credential.UserGateway:  {bus.StreamEvents: true, bus.StreamTools: false},
		credential.UserEgress:   {"KV_" + bus.BucketVaults: true, bus.StreamEvents: false, bus.StreamTools: false},
		credential.UserMemory:   {"OBJ_" + bus.BucketSkills: true, bus.StreamEvents: false, bus.StreamTools: false},
	}
	for user, streams := range reads {
		for stream, want := range streams {
			if got := credential.Reads(user)(stream); got != want {
				t.Errorf("%s reads %s: %v, want %v", user, stream, got, want)
			}
		}
	}
	if credential.Reads(credential.UserAdmin) != nil {
		t.Error("the administrator reads only some streams, want all")
	}
}
