package sandboxmanager

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/uuid"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/egressapi"
	"corral.dev/pkg/environment"
	"corral.dev/pkg/environmentapi"
	"corral.dev/pkg/event"
	"corral.dev/pkg/lock"
	"corral.dev/pkg/snapshot"
	"corral.dev/services/sandbox-manager/internal/sandbox"
)

// Environments' layers: an environment's setup runs once per version, and
// what it leaves in /opt/env is the layer every session of that version
// gets read-only. A node keeps the layers it has in
// DataDir/environments/<tenant>/<version>, each made whole elsewhere and
// renamed there, so that its presence says it is complete; the store keeps
// each one built as a manifest, e.<tenant>.<version>, in the snapshots'
// format and naming their blobs, which the sweep keeps. A node without a
// layer restores it from the store; only where the store has none does it
// build it.
//
// Builds of one version are serialised on a node. Two nodes may build one
// version at once (sessions of one environment starting on both before
// either stored it): both builds are of one definition, either's
// manifest may be the one kept, and each node uses its own; it costs a
// second build, never a wrong layer.

// environments is what a node keeps of its tenants' environments.
type environments struct {
	kv  jetstream.KeyValue
	dir string // DataDir/environments
	// builds serialises the builds and restores of each layer on this
	// node, by <tenant>.<version>.
	builds lock.Keyed
	// sessions caches the environment each session runs in, as its first
	// request records it, by [bus.SessionKey]: it never changes. Bounded;
	// a session forgotten reads its request again.
	sessions *lru.Cache[string, sessionEnvironment]
	// failed holds, by <tenant>.<version>, the builds that failed lately
	// with the session's failure: a broken setup is not run again for
	// every session and every call that needs its layer, only once
	// failedTTL is past.
	failed *lru.Cache[string, failedBuild]
}

// failedBuild is a build's failure, and when it failed.
type failedBuild struct {
	at  time.Time
	err error
}

// failedTTL is how long a failed build is not tried again.
const failedTTL = 2 * time.Minute

// sessionEnvironment is the environment a session runs in (none when
// version is ""), and the vaults its first request restricts it to (nil:
// none named).
type sessionEnvironment struct {
	name, version string
	vaults        []string
}

// newEnvironments returns the environments of js's bucket, keeping layers
// in dir, where what an interrupted build or restore left is removed.
func newEnvironments(ctx context.Context, js jetstream.JetStream, dir string) (*environments, error) {
	kv, err := js.KeyValue(ctx, bus.BucketEnvironments)
	if err != nil {
		return nil, fmt.Errorf("open kv %s: %w", bus.BucketEnvironments, err)
	}
	// The sandbox user passes through to the layers (see
	// [sandbox.Config.Layer]).
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, fmt.Errorf("environments: %w", err)
	}
	partial, _ := filepath.Glob(filepath.Join(dir, "*", ".*"))
	for _, p := range partial {
		if err := os.RemoveAll(p); err != nil {
			return nil, fmt.Errorf("environments: %w", err)
		}
	}
	return &environments{kv: kv, dir: dir, sessions: mustLRU[string, sessionEnvironment](1 << 14), failed: mustLRU[string, failedBuild](1 << 10)}, nil
}

// layerName is the name in the store of the manifest of tenant's layer of
// version.
func layerName(tenant, version string) string { return "e." + tenant + "." + version }

// checkVersion reports whether version may be an environment's: the hex
// of a SHA-256, as [environment.Spec.Version] makes it.
func checkVersion(version string) error {
	if b, err := hex.DecodeString(version); err != nil || len(b) != 32 || hex.EncodeToString(b) != version {
		return fmt.Errorf("environment version %q: want 64 lowercase hex digits", version)
	}
	return nil
}

// ensureEnvironment returns the host directory of the layer of version
// of tenant's environment name, which it restores from the store when
// this node has none, and builds, running the environment's setup once,
// when the store has none either; setupMS is how long a setup it ran
// took (0 when it ran none). The layer is complete once returned, and is
// never changed. id is the session it is for, named in the log.
//
// A layer this node has costs a stat. A setup that fails, or runs over
// [Config.SetupTimeout], and a version the environment no longer has,
// are the session's: [prepareError]s saying why. ctx bounds the wait for
// a build of the same version by another call, and the build.
func (s *Service) ensureEnvironment(ctx context.Context, tenant, name, version string, id egressapi.Identity) (layer string, setupMS int64, err error) {
	if err := event.CheckTenant(tenant); err != nil {
		return "", 0, err
	}
	if err := checkVersion(version); err != nil {
		return "", 0, err
	}
	layer = filepath.Join(s.envs.dir, tenant, version)
	if _, err := os.Stat(layer); err == nil {
		return layer, 0, nil
	}
	key := tenant + "." + version
	unlock, err := s.envs.builds.Lock(ctx, key)
	if err != nil {
		return "", 0, fmt.Errorf("wait for environment %s: %w", name, err)
	}
	defer unlock()
	if f, ok := s.envs.failed.Get(key); ok && time.Since(f.at) < failedTTL {
		return "", 0, f.err
	}
	if _, err := os.Stat(layer); err == nil {
		return layer, 0, nil // made while this call waited
	}
	if err := os.MkdirAll(filepath.Dir(layer), 0o711); err != nil {
		return "", 0, fmt.Errorf("environment %s: %w", name, err)
	}
	restored, err := s.restoreLayer(ctx, tenant, version, layer)
	switch {
	case restored:
		return layer, 0, nil
	case ctx.Err() != nil:
		return "", 0, fmt.Errorf("restore environment %s: %w", name, ctx.Err())
	case err != nil:
		// Built again rather than never: the same layer.
		s.log.WarnContext(ctx, "environment layer not restored; building it", "tenant", tenant, "environment", name, "version", version, "err", err)
	}
	e, err := environmentapi.Lookup(ctx, s.envs.kv, tenant, name, version)
	if errors.Is(err, environmentapi.ErrUnknown) || errors.Is(err, environmentapi.ErrVersionGone) {
		return "", 0, failPrepare("%v", err)
	}
	if err != nil {
		return "", 0, err
	}
	setupMS, err = s.buildLayer(ctx, tenant, name, version, e.Spec, id, layer)
	if isPrepareError(err) {
		s.envs.failed.Add(key, failedBuild{time.Now(), err})
	}
	if err != nil {
		return "", 0, err
	}
	return layer, setupMS, nil
}

// partialDir returns a new name for a layer being made in the directory
// of tenant's layers: hidden, so that it is never taken for one, and
// removed at start if left.
func (s *Service) partialDir(tenant, what string) string {
	return filepath.Join(s.envs.dir, tenant, "."+what+"-"+strings.ToLower(rand.Text()[:12]))
}

// restoreLayer lays tenant's layer of version out as layer from the
// store, and reports whether the store had it.
func (s *Service) restoreLayer(ctx context.Context, tenant, version, layer string) (bool, error) {
	if s.snaps == nil {
		return false, nil
	}
	start := time.Now()
	rctx, cancel := bus.Bound(ctx)
	data, err := s.snaps.store.GetBytes(rctx, layerName(tenant, version))
	cancel()
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("restore the layer %s of %s: %w", version, tenant, err)
	}
	m, err := snapshot.DecodeManifest(data)
	if err != nil {
		return false, fmt.Errorf("restore the layer %s of %s: %w", version, tenant, err)
	}
	tmp := s.partialDir(tenant, "restore")
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return false, err
	}
	defer os.RemoveAll(tmp) // once renamed, there is nothing to remove
	if err := s.snaps.layOut(ctx, tmp, m.Files); err != nil {
		return false, fmt.Errorf("restore the layer %s of %s: %w", version, tenant, err)
	}
	if err := os.Rename(tmp, layer); err != nil {
		return false, err
	}
	s.log.InfoContext(ctx, "environment layer restored", "tenant", tenant, "version", version, "files", len(m.Files), "duration", time.Since(start))
	return true, nil
}

// setupLog is where a setup's output goes in its sandbox, whose end is
// what a failure reports.
const setupLog = "/tmp/setup.log"

// buildLayer runs spec's setup, of tenant's environment name at version,
// in a sandbox of its own, makes what it left the layer, keeps the layer
// in the store and records the build in the environment's entry. It
// returns how long the setup ran.
func (s *Service) buildLayer(ctx context.Context, tenant, name, version string, spec environment.Spec, id egressapi.Identity, layer string) (int64, error) {
	// The build speaks for no user: its layer is every session's, and
	// no user's own vault goes into what it fetches.
	build := egressapi.Identity{Tenant: tenant, Session: uuid.Must(uuid.NewV7()), Environment: name, EnvironmentVersion: version, Phase: egressapi.PhaseSetup}
	s.log.InfoContext(ctx, "environment setup started", "tenant", tenant, "environment", name, "version", version, "session", id.Session, "build", build.Session)
	tmp := s.partialDir(tenant, "build")
	defer os.RemoveAll(tmp) // once renamed, there is nothing to remove
	// The script runs in a subshell, set -eu and all; its output goes to
	// a file whose end is kept, where the reason of a failure is.
	command := "(\n" + spec.Script() + ") >" + setupLog + " 2>&1\nstatus=$?\ntail -n 40 " + setupLog + " | tail -c 4000\nexit $status\n"
	res, err := s.driver.Setup(ctx, build, tmp, command, s.cfg.SetupTimeout)
	if err != nil {
		return 0, fmt.Errorf("set up environment %s: %w", name, err)
	}
	ms := res.Duration.Milliseconds()
	switch {
	case res.TimedOut:
		return 0, failPrepare("the setup of environment %q ran over its time limit of %s (CORRAL_SANDBOX_SETUP_TIMEOUT) and was stopped", name, s.cfg.SetupTimeout)
	case res.IsError:
		code := "no exit code"
		if res.ExitCode != nil {
			code = fmt.Sprintf("exit code %d", *res.ExitCode)
		}
		return 0, failPrepare("the setup of environment %q failed (%s); its output ends:\n%s", name, code, strings.TrimSpace(res.Output))
	}
	if s.snaps != nil {
		if err := s.storeLayer(ctx, tenant, name, version, tmp); isPrepareError(err) {
			return 0, err
		} else if err != nil {
			// Whole here all the same: other nodes build it again.
			s.log.WarnContext(ctx, "environment layer not stored; kept on this node only", "tenant", tenant, "environment", name, "version", version, "err", err)
		}
	}
	if err := os.Rename(tmp, layer); err != nil {
		return 0, err
	}
	s.log.InfoContext(ctx, "environment built", "tenant", tenant, "environment", name, "version", version, "setup_ms", ms)
	if err := s.recordBuilt(ctx, tenant, name, version, ms); err != nil {
		// The layer is whole, here and in the store: what the entry
		// misses is only a hint to the harness.
		s.log.WarnContext(ctx, "record the environment's build", "tenant", tenant, "environment", name, "err", err)
	}
	return ms, nil
}

// storeLayer keeps the layer dir of tenant's environment name at version
// in the store, as snapshots keep a workspace: its files' contents
// content-addressed, and its manifest, e.<tenant>.<version>. A layer is
// held to a workspace's bounds.
func (s *Service) storeLayer(ctx context.Context, tenant, name, version, dir string) error {
	start := time.Now()
	c, err := s.snaps.capture(ctx, dir, bounds{files: s.cfg.WorkspaceFiles, bytes: s.cfg.WorkspaceBytes})
	// The build's directory is hashed once: it needs no cache.
	defer func() {
		for _, k := range c.keys {
			s.snaps.hashes.Remove(k)
		}
	}()
	if errors.Is(err, errBound) {
		return failPrepare("the layer the setup of environment %q made is over the bounds of a workspace: %v", name, err)
	}
	if err != nil {
		return fmt.Errorf("store the layer of environment %s: %w", name, err)
	}
	if err := s.snaps.uploadAll(ctx, dir, c); err != nil {
		return fmt.Errorf("store the layer of environment %s: %w", name, err)
	}
	if time.Since(start) >= s.snaps.grace/2 {
		// The sweep may not have kept what the manifest would name.
		return fmt.Errorf("store the layer of environment %s: took %v, over half the blob grace period (CORRAL_SANDBOX_BLOB_GRACE)", name, time.Since(start).Round(time.Second))
	}
	data, err := json.Marshal(&snapshot.Manifest{Files: c.files})
	if err != nil {
		return err
	}
	rctx, cancel := bus.Bound(ctx)
	defer cancel()
	_, err = s.snaps.store.Put(rctx, jetstream.ObjectMeta{
		Name:     layerName(tenant, version),
		Metadata: map[string]string{"environment": name},
	}, bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("store the layer of environment %s: %w", name, err)
	}
	return nil
}

// recordBuilt records in the entry of tenant's environment name that its
// version was built, unless the entry is of another version now.
func (s *Service) recordBuilt(ctx context.Context, tenant, name, version string, setupMS int64) error {
	for range 3 {
		e, rev, err := environmentapi.Get(ctx, s.envs.kv, tenant, name)
		if errors.Is(err, environmentapi.ErrUnknown) {
			return nil // removed meanwhile
		}
		if err != nil {
			return err
		}
		if e.Version != version || e.IsBuilt() {
			return nil
		}
		e.Built = &environmentapi.Built{Version: version, At: time.Now().UTC(), SetupMS: setupMS}
		data, err := json.Marshal(&e)
		if err != nil {
			return err
		}
		rctx, cancel := bus.Bound(ctx)
		_, err = s.envs.kv.Update(rctx, environmentapi.Key(tenant, name), data, rev)
		cancel()
		if !bus.Conflict(err) {
			return err
		}
	}
	return errors.New("the environment kept changing")
}

// sessionLayer is the driver's [sandbox.Config.Layer]: the layer of the
// environment of the session id names, as its first request records it
// (unless id names it already), restored or built if this node has none.
// A sandbox that prepares the workspace from a repository
// ([egressapi.Identity].Fetch) or builds a layer is no session's own: it
// gets none.
func (s *Service) sessionLayer(ctx context.Context, id egressapi.Identity) (sandbox.Layer, error) {
	if id.Fetch != "" || id.Phase != "" {
		return sandbox.Layer{}, nil
	}
	env := sessionEnvironment{name: id.Environment, version: id.EnvironmentVersion}
	if env.version == "" {
		var err error
		if env, err = s.environmentOf(ctx, id.Tenant, id.Session); err != nil {
			return sandbox.Layer{}, err
		}
	}
	if env.version == "" {
		return sandbox.Layer{}, nil
	}
	dir, _, err := s.ensureEnvironment(ctx, id.Tenant, env.name, env.version, id)
	if err != nil {
		return sandbox.Layer{}, err
	}
	return sandbox.Layer{Dir: dir, Environment: env.name, Version: env.version}, nil
}

// environmentOf returns the environment a session runs in, and the
// vaults it may use, as the first request the harness recorded says.
func (s *Service) environmentOf(ctx context.Context, tenant string, session uuid.UUID) (sessionEnvironment, error) {
	key := bus.SessionKey(tenant, session)
	if env, ok := s.envs.sessions.Get(key); ok {
		return env, nil
	}
	e, ok, err := s.logs.First(ctx, tenant, session, event.TypeSessionRequested)
	if err != nil {
		return sessionEnvironment{}, fmt.Errorf("read the first request of %s: %w", session, err)
	}
	var env sessionEnvironment
	if r, isReq := e.Event.(*event.SessionRequested); ok && isReq {
		env = sessionEnvironment{name: r.Environment, version: r.EnvironmentVersion, vaults: r.Vaults}
	}
	s.envs.sessions.Add(key, env)
	return env, nil
}
