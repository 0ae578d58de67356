package egress

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/process"
	"corral.dev/pkg/sessionlog"
	"corral.dev/pkg/version"
	"corral.dev/services/egress/internal/proxy"
)

// Service is a node's egress service: the proxy every sandbox with
// network on the node reaches through its own socket, the control socket
// the sandbox-manager opens those with, the vault API, and the requests
// held for reviewers.
type Service struct {
	cfg    Config
	nc     *nats.Conn
	js     jetstream.JetStream
	log    *slog.Logger
	logs   *sessionlog.Log
	vaults *vaults
	hold   *holder
	audit  *audit
	boxes  *sandboxes
	envs   *grants
}

// Start connects to NATS through env and returns the service, ready to
// [Service.Run].
func Start(ctx context.Context, cfg Config, env *process.Env) (*Service, error) {
	js, err := env.Join(ctx, "egress")
	if err != nil {
		return nil, err
	}
	return New(ctx, cfg, js, env.Log, env.Metrics)
}

// New returns an egress service using js, whose streams and buckets
// [bus.Setup] has created, with its metrics in reg. It makes the
// service's directory and, unless configured, its CA.
func New(ctx context.Context, cfg Config, js jetstream.JetStream, log *slog.Logger, reg prometheus.Registerer) (*Service, error) {
	log = log.With("service", "egress")
	if err := os.MkdirAll(cfg.Dir, 0o711); err != nil {
		return nil, fmt.Errorf("egress dir: %w", err)
	}
	certFile, keyFile := cfg.CACert, cfg.CAKey
	if certFile == "" {
		certFile, keyFile = filepath.Join(cfg.Dir, "ca.pem"), filepath.Join(cfg.Dir, "ca-key.pem")
	}
	ca, err := proxy.LoadOrCreateCA(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("egress CA: %w", err)
	}
	caPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("egress CA: %w", err)
	}
	system, err := os.ReadFile(cfg.SystemRoots)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("CORRAL_EGRESS_SYSTEM_CA: %w", err)
	}
	bundle := append(append(system, '\n'), caPEM...)
	// A test's stand-ins for real hosts have certificates of their own
	// CA: a tunnel's client checks them itself.
	bundle = append(append(bundle, '\n'), cfg.UpstreamCA...)

	roots, err := x509.SystemCertPool()
	if err != nil {
		roots = x509.NewCertPool()
	}
	if len(cfg.UpstreamCA) > 0 && !roots.AppendCertsFromPEM(cfg.UpstreamCA) {
		return nil, fmt.Errorf("CORRAL_EGRESS_TEST_UPSTREAM_CA holds no PEM certificate")
	}

	vkv, err := js.KeyValue(ctx, bus.BucketVaults)
	if err != nil {
		return nil, fmt.Errorf("open kv %s: %w", bus.BucketVaults, err)
	}
	ekv, err := js.KeyValue(ctx, bus.BucketEgress)
	if err != nil {
		return nil, fmt.Errorf("open kv %s: %w", bus.BucketEgress, err)
	}
	envkv, err := js.KeyValue(ctx, bus.BucketEnvironments)
	if err != nil {
		return nil, fmt.Errorf("open kv %s: %w", bus.BucketEnvironments, err)
	}
	v, err := newVaults(vkv, cfg.VaultKey, log)
	if err != nil {
		return nil, err
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	a, err := newAudit(reg)
	if err != nil {
		return nil, err
	}
	if err := sessionlog.Register(reg); err != nil {
		return nil, err
	}
	logs := sessionlog.New(js, sessionlog.Options{As: sessionlog.Egress, Reader: "egress", DeadLetters: true, Logger: log})
	s := &Service{
		cfg:    cfg,
		nc:     js.Conn(),
		js:     js,
		log:    log,
		logs:   logs,
		vaults: v,
		hold:   &holder{kv: ekv, logs: logs, key: cfg.ApprovalKey, log: log},
		audit:  a,
		envs:   &grants{kv: envkv, log: log},
	}
	p := proxy.New(proxy.Config{
		CA:           ca,
		RootCAs:      roots,
		Resolve:      cfg.Resolve,
		AllowPrivate: cfg.AllowPrivate,
		Logger:       log,
	}, judge{p: cfg.Policy, envs: s.envs}, v, s.hold, a)
	s.boxes = &sandboxes{dir: cfg.Dir, bundle: bundle, serve: p.Serve, restored: s.envs.restored}
	return s, nil
}

// Run serves until ctx is done: the sandboxes' sockets (again, after a
// restart), the control socket, the vault API and the reviewers'
// decisions.
func (s *Service) Run(ctx context.Context) error {
	if err := s.boxes.restore(ctx); err != nil {
		return fmt.Errorf("restore sandboxes: %w", err)
	}
	defer s.boxes.wait()
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.vaults.watch(ctx) })
	g.Go(func() error { return s.serveControl(ctx) })
	g.Go(func() error { return s.serveVaults(ctx) })
	g.Go(func() error {
		return bus.Consume(ctx, s.js, bus.Consumer{
			Stream: bus.StreamEvents,
			Config: jetstream.ConsumerConfig{
				Durable:       bus.ConsumerEgressDecisions,
				FilterSubject: sessionlog.KindFilter(event.TypeApprovalDecided),
			},
			Handler: s.handleDecision,
			Logger:  s.log,
		})
	})
	if s.cfg.ApprovalKey == nil {
		s.log.WarnContext(ctx, "no CORRAL_APPROVAL_PUBLIC_KEY: requests held for a reviewer never pass")
	}
	s.log.InfoContext(ctx, "egress started", "version", version.String(), "dir", s.cfg.Dir)
	return g.Wait()
}

// handleDecision takes a reviewer's decision from a session's log, judged
// first by where it is and who wrote it.
func (s *Service) handleDecision(ctx context.Context, m bus.Msg) error {
	en, err := s.logs.Judge(ctx, m)
	if err != nil {
		return err
	}
	if d, ok := en.Event.(*event.ApprovalDecided); ok {
		return s.hold.decided(ctx, en, d)
	}
	return nil
}
