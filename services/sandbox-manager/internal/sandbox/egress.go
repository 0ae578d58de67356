package sandbox

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/egressapi"
)

// Egress is the node's egress service, as the Driver uses it: the
// sandboxes' only way out. [egressapi.Client] is one. Each method is
// given the session's identity, and its ctx bounds the request.
type Egress interface {
	// Open makes (or finds) the socket of the session's sandbox, and says
	// whether the sandbox gets network and, if so, which host directory
	// to bind at [egressapi.SandboxDir].
	Open(ctx context.Context, id egressapi.Identity) (egressapi.Reply, error)
	// Drain returns what the session's sandbox sent since the last drain.
	Drain(ctx context.Context, id egressapi.Identity) (*egressapi.Summary, error)
	// Close removes the session's socket and directory.
	Close(ctx context.Context, id egressapi.Identity) error
}

// egressTimeout bounds each request to the egress service.
const egressTimeout = 10 * time.Second

// openEgress asks the egress service whether the sandbox about to start
// for s gets network, and returns the host directory to bind at
// [egressapi.SandboxDir]: "" for none, as without [Config.Egress].
func (d *Driver) openEgress(ctx context.Context, s *session) (string, error) {
	if d.cfg.Egress == nil {
		return "", nil
	}
	ctx, cancel := context.WithTimeout(ctx, egressTimeout)
	defer cancel()
	r, err := d.cfg.Egress.Open(ctx, s.id)
	switch {
	case err != nil:
		return "", fmt.Errorf("open the sandbox's egress: %w", err)
	case !r.Network:
		return "", nil
	case !filepath.IsAbs(r.Dir):
		return "", fmt.Errorf("open the sandbox's egress: directory %q is not absolute", r.Dir)
	}
	return filepath.Clean(r.Dir), nil
}

// drainEgress puts what the sandbox of s sent during a call into the
// call's result res, and the note on any refusals at the end of its
// output. Nothing goes in when nothing went out or was refused. A failure
// is logged: the call's result stands without.
func (d *Driver) drainEgress(ctx context.Context, s *session, res *Result) {
	ctx, cancel := context.WithTimeout(ctx, egressTimeout)
	defer cancel()
	sum, err := d.cfg.Egress.Drain(ctx, s.id)
	if err != nil {
		d.cfg.Logger.WarnContext(ctx, "drain egress", "tenant", s.id.Tenant, "session", s.id.Session, "err", err)
		return
	}
	if sum.Empty() {
		return
	}
	res.Egress = sum
	if note := sum.Note(); note != "" {
		if res.Output != "" && !strings.HasSuffix(res.Output, "\n") {
			res.Output += "\n"
		}
		res.Output += note
	}
}

// closeEgress removes the egress socket and directory of a session whose
// sandbox is gone for good, naming it by id when its calls ran here since
// the Driver started, by tenant and session alone otherwise. A failure is
// logged: what is left is the egress service's to collect.
func (d *Driver) closeEgress(ctx context.Context, id egressapi.Identity, tenant string, session uuid.UUID) {
	if d.cfg.Egress == nil {
		return
	}
	if id.Session != session || id.Tenant != tenant {
		id = egressapi.Identity{Tenant: tenant, Session: session}
	}
	ctx, cancel := context.WithTimeout(ctx, egressTimeout)
	defer cancel()
	if err := d.cfg.Egress.Close(ctx, id); err != nil {
		d.cfg.Logger.WarnContext(ctx, "close egress", "tenant", tenant, "session", session, "err", err)
	}
}

// egressArgs returns the bwrap options that bind the host directory dir at
// [egressapi.SandboxDir], read-only, and put the proxy's and the CA
// bundle's variables in the sandbox's environment.
func egressArgs(dir string) []string {
	args := []string{"--ro-bind", dir, egressapi.SandboxDir}
	for _, kv := range egressapi.SandboxEnv() {
		args = append(args, "--setenv", kv[0], kv[1])
	}
	return args
}
