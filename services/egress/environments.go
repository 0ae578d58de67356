package egress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/egressapi"
	"corral.dev/pkg/environmentapi"
	"corral.dev/pkg/preset"
)

// An environment says what its sessions, and its setup, may reach besides
// the policy (package environment): a request no rule of the policy holds
// for, which the policy denies by default, is allowed when it goes to one
// of the environment's hosts or presets' hosts, on port 80 or 443. A rule
// that denies a request, or holds it for a reviewer, still decides it.
//
// What a sandbox's environment allows is read from the environments
// bucket when the sandbox is opened (and when a restarted service serves
// it again), as the version of the definition its identity names says:
// the session keeps what it started with, while the bucket keeps that
// version (see package environmentapi). An environment removed, or a
// version it no longer has, allows nothing beyond the policy. The judge,
// asked for every request, only looks it up.

// grant is what one sandbox's environment allows.
type grant struct {
	environment, version string
	hosts                preset.Hosts
}

// grants holds the grant of each open sandbox with an environment.
type grants struct {
	kv  jetstream.KeyValue
	log *slog.Logger

	mu sync.RWMutex
	by map[sessionKey]grant
}

// load reads what the environment of id allows, at its version, and keeps
// it for id's sandbox: nothing for a sandbox without one. An environment
// or version the bucket no longer has allows nothing (and is logged); a
// bucket that cannot be read is an error, and the sandbox is not opened.
func (g *grants) load(ctx context.Context, id egressapi.Identity) error {
	k := sessionKey{id.Tenant, id.Session}
	if id.Environment == "" || id.EnvironmentVersion == "" {
		g.forget(k)
		return nil
	}
	e, err := environmentapi.Lookup(ctx, g.kv, id.Tenant, id.Environment, id.EnvironmentVersion)
	if errors.Is(err, environmentapi.ErrUnknown) || errors.Is(err, environmentapi.ErrVersionGone) {
		g.log.WarnContext(ctx, "environment grants nothing", "tenant", id.Tenant, "session", id.Session, "environment", id.Environment, "err", err)
		g.forget(k)
		return nil
	}
	if err != nil {
		return fmt.Errorf("environment %s: %w", id.Environment, err)
	}
	// Checked again, as the API checked it before storing it: a definition
	// written to the bucket by anything else (a host "*") grants nothing.
	if err := e.Spec.Validate(); err != nil {
		g.log.WarnContext(ctx, "environment grants nothing: its definition does not validate", "tenant", id.Tenant, "environment", id.Environment, "err", err)
		g.forget(k)
		return nil
	}
	hs, unknown := preset.Of(e.Spec.Egress.Presets)
	if unknown != "" {
		return fmt.Errorf("environment %s: no preset %q", id.Environment, unknown)
	}
	for _, h := range e.Spec.Egress.Hosts {
		hs.Add(strings.ToLower(h))
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.by == nil {
		g.by = make(map[sessionKey]grant)
	}
	g.by[k] = grant{environment: id.Environment, version: id.EnvironmentVersion, hosts: hs}
	return nil
}

// restored loads the grant of a sandbox a restarted service serves
// again; one that cannot be read allows nothing, and is logged.
func (g *grants) restored(ctx context.Context, id egressapi.Identity) {
	if err := g.load(ctx, id); err != nil {
		g.log.WarnContext(ctx, "environment of a sandbox served again", "tenant", id.Tenant, "session", id.Session, "err", err)
	}
}

// any reports whether id's sandbox's environment allows some host.
func (g *grants) any(id egressapi.Identity) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	gr, ok := g.by[sessionKey{id.Tenant, id.Session}]
	return ok && !gr.hosts.Empty()
}

// allows reports whether id's sandbox's environment allows host on port,
// and names the rule that did: "environment:<name>".
func (g *grants) allows(id egressapi.Identity, host string, port int) (rule string, ok bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	gr, found := g.by[sessionKey{id.Tenant, id.Session}]
	if !found || gr.environment != id.Environment || gr.version != id.EnvironmentVersion || !gr.hosts.Match(host, port) {
		return "", false
	}
	return "environment:" + gr.environment, true
}

func (g *grants) forget(k sessionKey) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.by, k)
}
