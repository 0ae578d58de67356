// Package slackbridge is Corral's Slack bridge. It takes Slack's Events API
// (mentions of the app and direct messages), a slash command and button
// clicks over HTTP, every request checked against Slack's signature; a
// Slack thread is a session: the first message starts it, and later ones
// in the thread continue it. The bridge follows each session's log and
// posts its progress, its pending approvals (with Approve and Deny
// buttons, decided through the approval service) and its answer into the
// thread.
//
// The bridge is a client of the platform, as any bot: it signs in once
// for each tenant its workspaces belong to, with a credential of that
// tenant ([Connect]), and does everything for a workspace through its
// tenant's connection, whose permissions name that tenant alone.
package slackbridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/credential"
	"corral.dev/pkg/process"
	"corral.dev/pkg/sessionlog"
	"corral.dev/pkg/version"
)

// Service is the Slack bridge.
type Service struct {
	cfg Config
	// tenants are what the bridge does for each tenant it serves, by
	// name: everything for a workspace goes through its tenant's.
	tenants map[string]*tenant
	// store keeps the threads, each through its tenant's connection.
	store store
	slack *webAPI
	log   *slog.Logger
	// lives show the model's text in the progress messages of the
	// sessions followed.
	lives liveStatuses

	// wake carries sessions to follow to Run's loop, which owns the
	// followers.
	wake chan sessionRef
	// work carries what a request leaves to be done after Slack has its
	// answer (a click's decision) to Run's workers.
	work chan func(ctx context.Context)
	// addr is where Run serves, once it does.
	addrOnce sync.Once
	addr     chan string
}

// tenant is the bridge's side of one tenant: its connection, signed in
// with the tenant's credential, and what reads and writes through it.
type tenant struct {
	name string
	// reviewer is who clicks are decided as: the reviewer of the
	// tenant's credential, or "" for a bot's, which decides nothing.
	reviewer string
	js       jetstream.JetStream
	// logs judges every event the bridge reads: it posts only what the
	// session's log accepts, never what a body says about itself.
	logs *sessionlog.Log
}

// Start returns the bridge cfg configures in the process env: signed in
// once for each tenant it serves ([Connect], with the process's client
// options), the process draining those connections when it closes.
func Start(ctx context.Context, cfg Config, env *process.Env) (*Service, error) {
	conns, err := Connect(ctx, cfg, env.Log, env.ClientOptions...)
	if err != nil {
		return nil, err
	}
	for _, c := range conns {
		env.Adopt(c.NC)
	}
	if err := sessionlog.Register(env.Metrics); err != nil {
		return nil, err
	}
	return New(ctx, cfg, conns, env.Log)
}

// New returns a bridge that speaks for each tenant cfg serves through its
// connection in conns ([Connect] makes them). It refuses a tenant without
// one, or whose credential is not a bot's or a reviewer's of that tenant
// (a reviewer's when cfg names reviewers), and a tenant whose keys of the
// bridge's bucket it cannot read: the bucket is set up by an
// administrator ([Setup]), and the streams by [bus.Setup].
func New(ctx context.Context, cfg Config, conns map[string]Conn, log *slog.Logger) (*Service, error) {
	log = log.With("service", "slack-bridge")
	s := &Service{
		cfg:     cfg,
		tenants: make(map[string]*tenant),
		store:   store{js: make(map[string]jetstream.JetStream)},
		slack:   &webAPI{base: cfg.APIURL, token: cfg.BotToken, hc: &http.Client{Timeout: 30 * time.Second}, log: log},
		log:     log,
		wake:    make(chan sessionRef, 64),
		work:    make(chan func(context.Context), 64),
		addr:    make(chan string, 1),
	}
	for _, name := range cfg.tenants() {
		c, ok := conns[name]
		if !ok || c.NC == nil {
			return nil, fmt.Errorf("slack bridge: no connection for tenant %s", name)
		}
		if err := cfg.check(name, c.Credential); err != nil {
			return nil, err
		}
		js, err := jetstream.New(c.NC)
		if err != nil {
			return nil, err
		}
		t := &tenant{
			name: name,
			js:   js,
			// A client: no dead letters (it may not publish there), and
			// it reads as a client may.
			logs: sessionlog.New(js, sessionlog.Options{Reader: "slack-bridge", Client: true, Logger: log}),
		}
		if c.Credential.Role == credential.RoleReviewer {
			t.reviewer = c.Credential.User
		}
		s.tenants[name], s.store.js[name] = t, js
		if err := s.store.check(ctx, name); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// tenant returns the bridge's side of the tenant of session r.
func (s *Service) tenant(r sessionRef) (*tenant, error) {
	t, ok := s.tenants[r.Tenant]
	if !ok {
		return nil, fmt.Errorf("session %s: tenant %s is none of the bridge's", r.key(), r.Tenant)
	}
	return t, nil
}

// Addr returns the address Run serves Slack's requests on, once it does.
func (s *Service) Addr(ctx context.Context) (string, error) {
	select {
	case a := <-s.addr:
		s.addr <- a
		return a, nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// workers is how many clicks are decided at once.
const workers = 4

// Run serves Slack's requests on cfg.Listen and follows the sessions of
// open threads (those a restart left too) until ctx is done.
func (s *Service) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("slack bridge: %w", err)
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.ErrorContext(ctx, "serve", "err", err)
		}
	})
	s.addrOnce.Do(func() { s.addr <- ln.Addr().String() })
	s.log.InfoContext(ctx, "slack bridge started", "version", version.String(), "listen", ln.Addr().String(), "api", s.cfg.APIURL, "tenants", s.cfg.tenants())

	for range workers {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case job := <-s.work:
					job(ctx)
				}
			}
		})
	}
	// Threads a previous run left open are followed again from what it
	// had posted.
	var open []sessionRef
	for _, name := range s.cfg.tenants() {
		refs, err := s.store.open(ctx, name)
		if err != nil {
			s.log.WarnContext(ctx, "resume threads", "tenant", name, "err", err)
		}
		open = append(open, refs...)
	}
	// Keyed by tenant and session: a session ID alone may be another
	// tenant's too.
	following := make(map[string]bool) // session key → woken again meanwhile
	done := make(chan sessionRef)
	start := func(session sessionRef) {
		if again, ok := following[session.key()]; ok {
			if !again {
				following[session.key()] = true
			}
			return
		}
		following[session.key()] = false
		wg.Go(func() {
			s.follow(ctx, session)
			select {
			case done <- session:
			case <-ctx.Done():
			}
		})
	}
	for _, session := range open {
		start(session)
	}
	for {
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			_ = srv.Shutdown(sctx)
			cancel()
			return nil
		case session := <-s.wake:
			start(session)
		case session := <-done:
			again := following[session.key()]
			delete(following, session.key())
			if again {
				// Woken while it was ending: it may have missed a request.
				start(session)
			}
		}
	}
}

// followLater asks Run to follow session's thread.
func (s *Service) followLater(ctx context.Context, session sessionRef) {
	select {
	case s.wake <- session:
	case <-ctx.Done():
	}
}
