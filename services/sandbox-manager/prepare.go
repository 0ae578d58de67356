package sandboxmanager

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"al.essio.dev/pkg/shellescape"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/egressapi"
	"corral.dev/pkg/event"
	"corral.dev/pkg/snapshot"
	"corral.dev/pkg/tool"
)

// Preparing a workspace: a session whose first request names a
// repository, uploaded files or an environment not built yet gets, before
// the model's first turn, a call [event.PrepareTool] that lays the
// workspace out (clones the repository, in a sandbox that may fetch from
// it alone, through egress, which adds the tenant's credentials; or
// writes the uploaded files) and builds the environment. The workspace is
// then snapshotted, and its manifest kept a second time as the session's
// base (p.<tenant>.<session>), which `corral workspace diff` and the
// changes each call reports compare against. The base's metadata names
// the call and what it laid out: a preparation whose node died before
// recording its result is not done again.

// prepareError is a failure of a workspace's preparation that is the
// session's, not the node's: an unknown ref, a forge refusing the
// credentials, files over the workspace's quota, an upload that does not
// match its hash, an environment whose setup failed. The session fails
// with its message; trying again would fail again.
type prepareError struct{ msg string }

func (e *prepareError) Error() string { return e.msg }

// failPrepare returns a [prepareError].
func failPrepare(format string, args ...any) error {
	return &prepareError{msg: fmt.Sprintf(format, args...)}
}

// isPrepareError reports whether err is the session's (see [prepareError]).
func isPrepareError(err error) bool {
	var pe *prepareError
	return errors.As(err, &pe)
}

// cloneTimeout bounds a repository's clone.
const cloneTimeout = 10 * time.Minute

// runPrepare prepares the workspace of c's session, placed here,
// and records what it laid out, or why it could not. The caller holds the
// session's lock.
func (s *Service) runPrepare(ctx context.Context, c *event.ToolCall) error {
	res := event.ToolCompleted{
		Header:  event.NewHeader(event.TypeToolCompleted, c.Tenant, c.Session),
		Call:    c.Call,
		Name:    c.Name,
		Service: bus.ServiceSandbox,
		User:    c.User,
	}
	if done, err := s.recorded(ctx, c); err != nil || done {
		return err
	}
	var in event.PrepareInput
	if err := json.Unmarshal(c.Input, &in); err != nil {
		res.Output, res.IsError = fmt.Sprintf("the workspace's preparation is malformed: %v", err), true
		return s.record(ctx, c, &res, "")
	}
	key := bus.SessionKey(c.Tenant, c.Session)
	callCtx, done, stopped := s.stops.start(ctx, key)
	if stopped != "" {
		res.Output, res.IsError = "Not prepared: "+stopped+".", true
		return s.record(ctx, c, &res, "")
	}
	defer done()
	start := time.Now()
	p, err := s.preparedBefore(ctx, c)
	if err == nil && p == nil {
		p, err = s.prepare(callCtx, c, in, &res)
	}
	res.DurationMS = time.Since(start).Milliseconds()
	switch {
	case errors.Is(context.Cause(callCtx), errStopped) && ctx.Err() == nil:
		res.Output, res.IsError = "Not prepared: the session was stopped while its workspace was being prepared.", true
	case isPrepareError(err):
		res.Output, res.IsError = err.Error(), true
	case err != nil:
		return fmt.Errorf("prepare the workspace of %s: %w", c.Session, err)
	default:
		res.Prepared = p
		res.Output = describePrepared(in, p)
	}
	s.log.InfoContext(ctx, "workspace prepared", "session", c.Session, "failed", res.IsError, "duration", time.Since(start))
	return s.record(ctx, c, &res, "")
}

// prepare lays out the workspace of c's session as in says, and builds
// its environment, returning what it did; what a clone sent out goes in
// rec, the result to be recorded.
func (s *Service) prepare(ctx context.Context, c *event.ToolCall, in event.PrepareInput, rec *event.ToolCompleted) (*event.Prepared, error) {
	p := &event.Prepared{}
	id := egressapi.Identity{Tenant: c.Tenant, User: c.User, Session: c.Session, Environment: in.Environment, EnvironmentVersion: in.EnvironmentVersion, Vaults: in.Vaults}
	if in.Environment != "" {
		_, setup, err := s.ensureEnvironment(ctx, c.Tenant, in.Environment, in.EnvironmentVersion, id)
		if err != nil {
			return nil, err
		}
		p.SetupMS = setup
	}
	if in.Repo == nil && in.Files == "" {
		return p, nil
	}
	// Whatever an interrupted preparation left is started afresh.
	if err := s.driver.Destroy(ctx, c.Tenant, c.Session); err != nil {
		return nil, err
	}
	if s.snaps != nil {
		s.snaps.forget(bus.SessionKey(c.Tenant, c.Session))
	}
	dir := s.driver.Workspace(c.Tenant, c.Session)
	switch {
	case in.Files != "":
		if _, _, err := s.layoutFiles(ctx, c.Tenant, c.User, in.Files, dir); err != nil {
			return nil, err
		}
	case in.Repo != nil:
		commit, err := s.clone(ctx, id, in.Repo, rec)
		if err != nil {
			return nil, err
		}
		p.Commit = commit
	}
	lim := bounds{files: s.cfg.WorkspaceFiles, bytes: s.cfg.WorkspaceBytes}
	if s.snaps == nil {
		n, size, err := countFiles(dir, lim)
		if err != nil {
			return nil, quotaError(err)
		}
		p.Files, p.Bytes = n, size
		return p, nil
	}
	// What the workspace starts with is the source's, not the model's:
	// it counts against the workspace's bounds, not against what its
	// snapshots may store an hour.
	if _, _, err := s.snaps.take(ctx, c.Tenant, c.Session, dir, limits{bounds: lim}); err != nil {
		return nil, quotaError(err)
	}
	s.snaps.bases.Remove(bus.SessionKey(c.Tenant, c.Session))
	if err := s.snaps.keepBase(ctx, c.Tenant, c.Session, c.Call, p); err != nil {
		return nil, err
	}
	return p, nil
}

// quotaError makes a workspace over one of its bounds the session's
// failure.
func quotaError(err error) error {
	if errors.Is(err, errBound) {
		return failPrepare("the workspace is over its quota: %v", err)
	}
	return err
}

// preparedBefore returns what call c laid out if it did so before (its
// node died before recording it, or this one stopped), having brought the
// workspace here up to that snapshot; nil if it did not.
func (s *Service) preparedBefore(ctx context.Context, c *event.ToolCall) (*event.Prepared, error) {
	if s.snaps == nil {
		return nil, nil
	}
	p, err := s.snaps.base(ctx, c.Tenant, c.Session, c.Call)
	if err != nil || p == nil {
		return nil, err
	}
	dir := s.driver.Workspace(c.Tenant, c.Session)
	if err := s.driver.Destroy(ctx, c.Tenant, c.Session); err != nil {
		return nil, err
	}
	if _, err := s.snaps.restore(ctx, c.Tenant, c.Session, dir); err != nil {
		return nil, err
	}
	return p, nil
}

var commitRE = regexp.MustCompile(`^[0-9a-f]{40}([0-9a-f]{24})?$`)

// clone fetches repository r into the workspace of id's session, in a
// sandbox that may fetch from r alone, what the policy allows of it (see
// [egressapi.Identity].Fetch), and returns the commit checked out; what it
// sent out, and had refused, goes in rec. The sandbox is stopped after:
// the session's own starts with the session's identity.
func (s *Service) clone(ctx context.Context, id egressapi.Identity, r *event.Repo, rec *event.ToolCompleted) (string, error) {
	if err := r.Check(); err != nil {
		return "", failPrepare("%v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, cloneTimeout)
	defer cancel()
	id.Fetch = r.URL
	defer s.driver.Stop(id.Tenant, id.Session)
	ref := r.Ref
	if ref == "" {
		ref = "HEAD"
	}
	depth := "--depth=1"
	switch {
	case r.Depth > 0:
		depth = "--depth=" + strconv.Itoa(r.Depth)
	case r.Depth < 0:
		depth = ""
	}
	// The ref is checked out on a branch of its name, unless it is a
	// commit or the default branch: then HEAD is detached there.
	branch := ""
	if r.Ref != "" && !commitRE.MatchString(r.Ref) {
		branch = strings.TrimPrefix(strings.TrimPrefix(r.Ref, "refs/heads/"), "refs/tags/")
	}
	script := strings.Join([]string{
		"set -e",
		"cd " + tool.Workspace,
		"git init -q .",
		"git remote add origin " + shellescape.Quote(r.URL),
		"git fetch -q --no-tags " + depth + " --end-of-options origin " + shellescape.Quote(ref),
		"git -c advice.detachedHead=false checkout -q FETCH_HEAD",
	}, "\n")
	if branch != "" && !strings.HasPrefix(r.Ref, "refs/tags/") {
		script += "\n(git checkout -q -B " + shellescape.Quote(branch) + " 2>/dev/null || true)"
	}
	script += "\ngit rev-parse HEAD"
	res, err := s.driver.Run(ctx, id, &tool.BashArgs{Command: script, Timeout: int(cloneTimeout / time.Millisecond)})
	if err != nil {
		return "", err
	}
	rec.Egress = res.Egress
	out := strings.TrimSpace(res.Output)
	if res.IsError {
		if res.Egress != nil && len(res.Egress.Refused) > 0 {
			return "", failPrepare("cloning %s at %s failed: egress refused it: %s", r.URL, ref, res.Egress.Note())
		}
		return "", failPrepare("cloning %s at %s failed: %s", r.URL, ref, cloneFailure(out))
	}
	lines := strings.Split(out, "\n")
	commit := strings.TrimSpace(lines[len(lines)-1])
	if !commitRE.MatchString(commit) {
		return "", failPrepare("cloning %s at %s: git did not name the commit checked out: %s", r.URL, ref, tail(out, 2000))
	}
	return commit, nil
}

// cloneFailure says why git failed, from its output.
func cloneFailure(out string) string {
	low := strings.ToLower(out)
	why := ""
	switch {
	case strings.Contains(low, "couldn't find remote ref") || strings.Contains(low, "not our ref") || strings.Contains(low, "unadvertised object"):
		why = "the repository has no such branch, tag or commit. "
	case strings.Contains(low, "authentication failed") || strings.Contains(low, "could not read username") || strings.Contains(low, "401") || strings.Contains(low, "403"):
		why = "the forge refused the credentials (or none was sent: a vault binding the repository's host, corral vaults create, gives egress the token to add). "
	case strings.Contains(low, "not found") || strings.Contains(low, "404"):
		why = "the forge has no such repository, or hides it from these credentials. "
	}
	return why + "git said: " + tail(out, 2000)
}

// tail returns the last n bytes of s at most.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// describePrepared is what the model is told of its workspace before its
// first turn.
func describePrepared(in event.PrepareInput, p *event.Prepared) string {
	var b strings.Builder
	switch {
	case in.Repo != nil:
		ref := in.Repo.Ref
		if ref == "" {
			ref = "its default branch"
		}
		fmt.Fprintf(&b, "Note: /workspace starts as a checkout of the git repository %s at %s (commit %s): %d files, %d bytes. Credentials for the forge, where the policy lets you reach it, are added outside the sandbox: none is in the checkout or its environment.", in.Repo.URL, ref, p.Commit, p.Files, p.Bytes)
	case in.Files != "":
		fmt.Fprintf(&b, "Note: /workspace starts with the files the user uploaded: %d files, %d bytes.", p.Files, p.Bytes)
	}
	if in.Environment != "" {
		if b.Len() > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "Note: this session runs in the environment %q: what its setup installed is in /opt/env (read-only), its programs on PATH.", in.Environment)
	}
	return b.String()
}

// keepBase keeps the session's last snapshot, just taken of the workspace
// call prepared, as its base, with what the call laid out: p, whose Files
// and Bytes it counts from the snapshot's manifest (a repository's .git
// left out).
func (s *snapshots) keepBase(ctx context.Context, tenant string, session, call uuid.UUID, p *event.Prepared) error {
	rctx, cancel := bus.Bound(ctx)
	defer cancel()
	data, err := s.store.GetBytes(rctx, snapshot.ManifestName(tenant, session))
	if err != nil {
		return fmt.Errorf("keep the base of %s: %w", session, err)
	}
	m, err := snapshot.DecodeManifest(data)
	if err != nil {
		return fmt.Errorf("keep the base of %s: %w", session, err)
	}
	p.Files, p.Bytes = 0, 0
	for _, f := range m.Files {
		if f.Hash != "" && !snapshot.InGit(f.Path) {
			p.Files++
			p.Bytes += f.Size
		}
	}
	meta, err := json.Marshal(p)
	if err != nil {
		return err
	}
	_, err = s.store.Put(rctx, jetstream.ObjectMeta{
		Name:     snapshot.BaseName(tenant, session),
		Metadata: map[string]string{"call": call.String(), "prepared": string(meta)},
	}, bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("keep the base of %s: %w", session, err)
	}
	return nil
}

// base returns what call laid out, if the session's base is its; nil if
// the session has none, or another call's.
func (s *snapshots) base(ctx context.Context, tenant string, session, call uuid.UUID) (*event.Prepared, error) {
	rctx, cancel := bus.Bound(ctx)
	defer cancel()
	info, err := s.store.GetInfo(rctx, snapshot.BaseName(tenant, session))
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if info.Metadata["call"] != call.String() {
		return nil, nil
	}
	var p event.Prepared
	if err := json.Unmarshal([]byte(info.Metadata["prepared"]), &p); err != nil {
		return nil, fmt.Errorf("the base of %s: %w", session, err)
	}
	return &p, nil
}

// countFiles returns the regular files of the workspace dir and the bytes
// they hold, a repository's .git left out (what the source laid out);
// links are not followed. It stops with a bound's error past b, which
// counts everything.
func countFiles(dir string, b bounds) (n int, size int64, err error) {
	var all int64
	err = walk(dir, b, func(_ *os.Root, _, rel string, info fs.FileInfo) error {
		if !info.Mode().IsRegular() {
			return nil
		}
		if all += info.Size(); b.bytes > 0 && all > b.bytes {
			return tooManyBytes(b.bytes)
		}
		if !snapshot.InGit(rel) {
			n++
			size += info.Size()
		}
		return nil
	})
	return n, size, err
}
