package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
	"corral.dev/pkg/logtest"
	"corral.dev/pkg/natstest"
)

// platform is an embedded NATS server whose client connections the auth
// service, running against it, signs in.
type platform struct {
	srv *server.Server
	url string
	// admin is the administrator's connection, and js and kv its
	// JetStream and credentials bucket.
	admin *nats.Conn
	js    jetstream.JetStream
	kv    jetstream.KeyValue
	reg   *prometheus.Registry
	logs  *logtest.Buffer
	// secrets are every secret issued, which no log may hold.
	mu      sync.Mutex
	secrets []string
}

// start starts a server configured as deploy/nats.conf is (the service
// users, the admin, the clients' account), asking an auth service with ttl
// about everyone else, and that service.
func start(t *testing.T, ttl time.Duration) *platform {
	t.Helper()
	return startWith(t, map[string]string{"CORRAL_AUTH_TTL": ttl.String()})
}

// startWith is start with the auth service's settings in env.
func startWith(t *testing.T, env map[string]string) *platform {
	t.Helper()
	seed, pub, err := credential.NewIssuer()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir() // registered first, so removed after the shutdown
	passwords := map[string]string{}
	for _, u := range credential.AuthUsers() {
		passwords[u] = "pw-" + u
	}
	conf := filepath.Join(dir, "nats.conf")
	if err := credential.WriteConfigFile(conf, passwords, pub); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	opts.Host, opts.Port, opts.JetStream, opts.StoreDir, opts.NoLog, opts.NoSigs = "127.0.0.1", -1, true, dir, true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	p := &platform{srv: srv, url: srv.ClientURL(), reg: prometheus.NewRegistry(), logs: &logtest.Buffer{}}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p.admin, err = nats.Connect(p.url, nats.UserInfo(credential.UserAdmin, "pw-admin"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.admin.Close)
	if p.js, err = jetstream.New(p.admin); err != nil {
		t.Fatal(err)
	}
	if err := bus.Setup(ctx, p.js); err != nil {
		t.Fatal(err)
	}
	if p.kv, err = p.js.KeyValue(ctx, bus.BucketCredentials); err != nil {
		t.Fatal(err)
	}

	log := slog.New(slog.NewTextHandler(io.MultiWriter(p.logs, t.Output()), &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg, err := LoadConfig(func(k string) string {
		if k == "CORRAL_AUTH_ISSUER_SEED" {
			return seed
		}
		return env[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Metrics = p.reg
	anc, err := bus.Connect(p.url, "auth", log, bus.SignIn(credential.UserAuth, "pw-auth"))
	if err != nil {
		t.Fatal(err)
	}
	ajs, err := jetstream.New(anc)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := New(ctx, cfg, ajs, log)
	if err != nil {
		t.Fatal(err)
	}
	// After the service stops.
	t.Cleanup(func() {
		anc.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, s := range p.secrets {
			if strings.Contains(p.logs.String(), s) {
				t.Errorf("a secret is in the logs:\n%s", p.logs)
			}
		}
	})
	natstest.Serve(t, svc.Run)
	// Clients are let in once the service listens.
	g, err := srv.LookupAccount(credential.AccountServices)
	if err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 5*time.Second, func() error {
		if !g.SubscriptionInterest(Subject) {
			return errors.New("the auth service does not listen")
		}
		return nil
	})
	return p
}

// issue keeps a new credential in the bucket and returns it and its
// secret.
func (p *platform) issue(t *testing.T, tenant, user string, role credential.Role) (credential.Credential, string) {
	t.Helper()
	c, secret, err := credential.New(tenant, user, role, "test")
	if err != nil {
		t.Fatal(err)
	}
	p.put(t, c.ID, c)
	p.mu.Lock()
	p.secrets = append(p.secrets, secret)
	p.mu.Unlock()
	return c, secret
}

// put keeps c in the bucket under key.
func (p *platform) put(t *testing.T, key string, c credential.Credential) {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.kv.Put(context.Background(), key, b); err != nil {
		t.Fatal(err)
	}
}

// client is a client's connection, with the errors the server sent it.
type client struct {
	*nats.Conn
	errs chan error
}

// connect signs in as the credential id with secret, as the CLI does.
func (p *platform) connect(t *testing.T, id, secret string, opts ...nats.Option) (*client, error) {
	t.Helper()
	c := &client{errs: make(chan error, 100)}
	opts = append([]nats.Option{
		nats.UserInfo(id, secret),
		nats.CustomInboxPrefix(credential.Inbox(id)),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case c.errs <- err:
			default:
			}
		}),
	}, opts...)
	nc, err := nats.Connect(p.url, opts...)
	if err != nil {
		return nil, err
	}
	t.Cleanup(nc.Close)
	c.Conn = nc
	return c, nil
}

// mustConnect is connect, failing the test on an error.
func (p *platform) mustConnect(t *testing.T, id, secret string, opts ...nats.Option) *client {
	t.Helper()
	c, err := p.connect(t, id, secret, opts...)
	if err != nil {
		t.Fatalf("connect as %s: %v", id, err)
	}
	return c
}

// refusal waits for the server's refusal of a publish to subject, or to
// a subject beginning with subject when it ends with a "*", and returns
// an error if none comes.
func (c *client) refusal(subject string, timeout time.Duration) error {
	deadline := time.After(timeout)
	for !c.refused(subject) {
		select {
		case <-deadline:
			return fmt.Errorf("no permissions violation for publish to %s within %s", subject, timeout)
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// refused reports whether the server refused a publish to subject (see
// [client.refusal]) among the errors it sent c since the last call. It
// drops the others.
func (c *client) refused(subject string) bool {
	want := fmt.Sprintf("Publish to %q", subject)
	if prefix, ok := strings.CutSuffix(subject, "*"); ok {
		want = strings.TrimSuffix(fmt.Sprintf("Publish to %q", prefix), `"`)
	}
	for {
		select {
		case err := <-c.errs:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), want) {
				return true
			}
		default:
			return false
		}
	}
}

// mayPublish publishes on subject as c and reports whether the message
// got through (nil: the admin, listening, received it) or was refused (a
// permissions violation).
func (p *platform) mayPublish(t *testing.T, c *client, subject string) error {
	t.Helper()
	sub, err := p.admin.SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := p.admin.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := c.Publish(subject, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if _, err := sub.NextMsg(10 * time.Millisecond); err == nil {
			return nil
		}
		if c.refused(subject) {
			return fmt.Errorf("publish to %s refused", subject)
		}
	}
	t.Fatalf("publish to %s: neither received nor refused", subject)
	return nil
}

// decisions returns corral_auth_decisions_total by outcome, as reg has it.
func decisions(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]float64)
	for _, mf := range mfs {
		if mf.GetName() != "corral_auth_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" {
					out[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}
