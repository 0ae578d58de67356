// Package sandboxmanager runs tool calls in bubblewrap sandboxes: it
// consumes the sandbox tool queue, runs each call in its session's sandbox,
// and records the result in the session's log. It holds no model key and no
// database access.
package sandboxmanager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/egressapi"
	"corral.dev/pkg/lock"
	"corral.dev/pkg/process"
	"corral.dev/pkg/sessionlog"
	"corral.dev/pkg/tool"
	"corral.dev/pkg/version"
	"corral.dev/services/sandbox-manager/internal/sandbox"
)

// Service is the sandbox-manager.
type Service struct {
	cfg    Config
	js     jetstream.JetStream
	driver *sandbox.Driver
	calls  jetstream.KeyValue
	skills jetstream.ObjectStore
	log    *slog.Logger
	// logs reads and writes the session logs: every event read is judged
	// by its subject and writer, and results are written as the sandbox.
	logs *sessionlog.Log
	// sessions serialises the calls of each session, by
	// [bus.SessionKey], with the reaper's and stops' work on it.
	sessions lock.Keyed
	// gate is where every call waits for its turn, from the shared queue
	// or forwarded: a session's calls one at a time and in order, at most
	// TenantConcurrency of a tenant's and Concurrency in all at once. A
	// call waiting for its session or tenant holds no slot.
	gate    *lock.Gate
	stops   stops
	metrics *serviceMetrics
	snaps   *snapshots // nil when snapshots are off
	place   *placement
	envs    *environments

	// notes are what each session's model is still to be told of its
	// sandbox's rebuilding (see rebuilt.go).
	notes *pendingNotes
}

// Start returns the sandbox-manager cfg configures in the process env:
// connected as the sandbox-manager, its metrics in the process's
// registry.
func Start(ctx context.Context, cfg Config, env *process.Env) (*Service, error) {
	js, err := env.Join(ctx, "sandbox-manager")
	if err != nil {
		return nil, err
	}
	cfg.Metrics = env.Metrics
	return New(ctx, cfg, js, env.Log)
}

// New returns a sandbox-manager using js, whose streams [bus.Setup] has
// created. It fails when bubblewrap is missing or unusable, saying how to
// install it. Unless cfg names the node, the node is the one named in the
// data directory, where New keeps a new name the first time.
func New(ctx context.Context, cfg Config, js jetstream.JetStream, log *slog.Logger) (*Service, error) {
	if cfg.Node == "" {
		node, err := nodeName(cfg.DataDir)
		if err != nil {
			return nil, err
		}
		cfg.Node = node
	}
	calls, err := js.KeyValue(ctx, bus.BucketCalls)
	if err != nil {
		return nil, fmt.Errorf("open kv %s: %w", bus.BucketCalls, err)
	}
	skills, err := js.ObjectStore(ctx, bus.BucketSkills)
	if err != nil {
		return nil, fmt.Errorf("open object store %s: %w", bus.BucketSkills, err)
	}
	s := &Service{cfg: cfg, js: js, calls: calls, skills: skills, log: log.With("service", "sandbox-manager"),
		gate: &lock.Gate{Size: cfg.Concurrency, PerGroup: cfg.TenantConcurrency}}
	s.logs = sessionlog.New(js, sessionlog.Options{As: sessionlog.Sandbox, Reader: "sandbox-manager", DeadLetters: true, Logger: s.log})
	reg := cfg.Metrics
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	if err := sessionlog.Register(reg); err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	s.metrics = newMetrics(reg, s)
	if s.envs, err = newEnvironments(ctx, js, filepath.Join(cfg.DataDir, "environments")); err != nil {
		return nil, err
	}
	if s.notes, err = newPendingNotes(filepath.Join(cfg.DataDir, "rebuilt")); err != nil {
		return nil, fmt.Errorf("notes: %w", err)
	}
	workspaces := filepath.Join(cfg.DataDir, "workspaces")
	var egress sandbox.Egress // nil: no sandbox has network
	if cfg.EgressSocket != "" {
		egress = &egressapi.Client{Socket: cfg.EgressSocket}
	}
	d, err := sandbox.New(sandbox.Config{
		Dir:             workspaces,
		Bwrap:           cfg.Bwrap,
		DefaultTimeout:  cfg.DefaultTimeout,
		FileTimeout:     cfg.FileTimeout,
		IdleTimeout:     cfg.IdleTimeout,
		StopTimeout:     cfg.StopTimeout,
		MaxSuspended:    cfg.MaxSuspended,
		PoolSize:        cfg.PoolSize,
		Skills:          s.skillsDir,
		Layer:           s.sessionLayer,
		OnStart:         s.metrics.started,
		MemoryBytes:     cfg.MemoryBytes,
		FileSizeBytes:   cfg.FileBytes,
		Processes:       cfg.Processes,
		CPUSeconds:      cfg.CPUSeconds,
		OpenFiles:       cfg.OpenFiles,
		CPUs:            cfg.CPUs,
		NodeMemoryBytes: cfg.NodeMemoryBytes,
		NodeCPUs:        cfg.NodeCPUs,
		User:            cfg.SandboxUID,
		Group:           cfg.SandboxGID,
		Egress:          egress,
		Logger:          s.log,
	})
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	s.driver = d
	if cfg.Snapshots {
		if s.snaps, err = newSnapshots(ctx, js, filepath.Join(cfg.DataDir, "unsnapshotted"), workspaces, cfg.BlobGrace); err != nil {
			return nil, fmt.Errorf("snapshots: %w", err)
		}
	}
	forget := func(string) {}
	if s.snaps != nil {
		forget = s.snaps.forget
	}
	if s.place, err = newPlacement(ctx, js, cfg.Node, cfg.Instance, forget, s.log); err != nil {
		d.Close()
		return nil, err
	}
	// The sandboxes' own cgroups confine them; where the host's paths
	// show through is the operator's to change.
	if shown, err := sandbox.ShownPath(workspaces); err == nil && !strings.HasPrefix(shown, "/<tenant>/") {
		s.log.InfoContext(ctx, "a sandbox's /proc/self/mountinfo shows its /workspace as the host path "+shown+": to show only /<tenant>/<session>, put the sandboxes' directory on a file system of its own", "dir", workspaces)
	}
	if ctls, why := d.Cgroups(); why != nil {
		s.log.WarnContext(ctx, "sandboxes are not all confined by cgroups: without pids a fork bomb in one can starve the host, without memory and cpu only each process's rlimits bound them; run the sandbox-manager as root or give it a cgroup subtree", "cgroups", ctls, "why", why)
	}
	return s, nil
}

// Run consumes tool calls until ctx is done, then lets running calls finish
// for a grace period.
func (s *Service) Run(ctx context.Context) error {
	s.log.InfoContext(ctx, "sandbox-manager started", "version", version.String(), "data_dir", s.cfg.DataDir, "node", s.cfg.Node)
	// What serves the calls in flight outlives ctx until the last of
	// them is recorded: the node's lease, above all, which, given up, lets
	// another node take its sessions over while their calls still run
	// here; and the stops, which may still kill them. The reaper stops
	// with ctx.
	wctx, stopWatching := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWatching()
	watched := make(chan error, 1)
	go func() { watched <- s.watchStops(wctx) }()
	served := make(chan error, 1)
	go func() { served <- s.serveForwarded(ctx) }()
	previewed := make(chan error, 1)
	go func() { previewed <- s.servePreviews(ctx) }()
	// The workspace API reads snapshots alone: it serves with snapshots
	// off too, where none is found.
	read := make(chan error, 1)
	go func() { read <- unlessStopped(ctx, s.serveWorkspaces(ctx)) }()
	envs := make(chan error, 1)
	go func() { envs <- unlessStopped(ctx, s.serveEnvironments(ctx)) }()
	leased, reaped := make(chan struct{}), make(chan struct{})
	go func() { s.place.keepAlive(wctx); close(leased) }()
	go func() { s.reap(ctx); close(reaped) }()
	err := bus.Consume(ctx, s.js, bus.Consumer{
		Stream: bus.StreamTools,
		Config: jetstream.ConsumerConfig{
			Durable:       bus.ConsumerSandboxCalls,
			FilterSubject: bus.ToolFilter(bus.ServiceSandbox),
			// Calls waiting for their session or tenant are pending acks
			// too: room for them, so that one session's long queue does
			// not stop the server delivering other tenants' calls.
			MaxAckPending: maxWaiting(s.cfg.Concurrency),
		},
		Concurrency: s.cfg.Concurrency,
		Admit:       bus.BySession,
		// One session's calls run one at a time: a turn of many, behind a
		// long one, would otherwise take the pending room of the node.
		MaxKeyWaiting: maxSessionWaiting,
		Gate:          s.gate,
		// A call may wait for its session's lock (the reaper's, a
		// stop's), and then run up to the longest Bash timeout, which
		// kills it first.
		Timeout: 3*tool.MaxTimeoutMillis*time.Millisecond + time.Minute,
		Handler: s.handleCall,
		// A call that can never run is answered with an error result; a
		// rejected one (its body and subject disagree) speaks for no
		// session and is only dead-lettered.
		OnGiveUp: s.logs.GiveUpCall(bus.ServiceSandbox, s.cfg.CallKey),
		AckDelay: bus.ToolAckDelay,
		Grace:    s.cfg.ShutdownGrace,
		Logger:   s.log,
	})
	serr := <-served
	perr := <-previewed
	rerr := <-read
	eerr := <-envs
	stopWatching()
	werr := <-watched
	<-leased
	<-reaped
	// No call is running once Consume returns: stop every sandbox.
	s.driver.Close()
	return errors.Join(err, serr, perr, rerr, eerr, werr)
}

// unlessStopped returns err unless ctx is done: an API that was still
// starting when the service stopped fails for that alone.
func unlessStopped(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}
