package sandboxmanager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/egressapi"
	"corral.dev/pkg/event"
	"corral.dev/pkg/metrics"
	"corral.dev/pkg/sessionlog"
	"corral.dev/pkg/tool"
	"corral.dev/services/sandbox-manager/internal/sandbox"
)

// interrupted is the result of a call that may have partly run before its
// sandbox-manager stopped: it is not run again behind the model's back.
const interrupted = "The call was interrupted: the sandbox-manager running it stopped before it finished. " +
	"It may have run partly, fully or not at all, and /workspace is as it left it; check its state before running it again."

// interruptedRestored is [interrupted] when the workspace was restored
// from a snapshot before the result (the note before it says so): what the
// call changed there is gone.
const interruptedRestored = "The call was interrupted: the sandbox-manager running it stopped before it finished. " +
	"It may have run partly, fully or not at all; whatever it changed in /workspace is gone, as the note above says. Check the state of /workspace before running it again."

// mayChange reports whether a call may change the workspace's files: it
// is snapshotted after it.
func mayChange(name string) bool {
	return !repeatable(name) || name == tool.Write
}

// repeatable reports whether running a call twice has the effect of running
// it once, so an interrupted one may simply be run again.
func repeatable(name string) bool {
	switch name {
	case tool.Read, tool.Glob, tool.Grep, tool.Write:
		return true
	}
	return false
}

// handleCall takes one tool call from the shared queue: it runs it here if
// its session is placed here (or placed nowhere yet, or on a node that is
// gone), and forwards it to the node its session is placed on otherwise.
// A call whose body names another tenant or session than its subject is
// rejected: returned as it is, it is dead-lettered and answers no session.
func (s *Service) handleCall(ctx context.Context, m bus.Msg) error {
	c, err := bus.DecodeToolCall(m, s.cfg.CallKey)
	if err != nil {
		return err
	}
	at, err := s.place.route(ctx, c.Tenant, c.Session)
	if err != nil {
		return err
	}
	if at.owner != "" {
		return s.forward(ctx, at.owner, m)
	}
	return s.runHere(ctx, c, m.Delivered > 1, at)
}

// runHere runs one tool call of a session placed here and records its
// result. A call whose result is recorded already is not run again. A call
// that is not repeatable is marked as started in the calls bucket before
// it runs; one that finds its mark without a result was interrupted, and
// is reported as interrupted instead of being run twice. redelivered says
// the call was delivered before; at is the session's placement here.
func (s *Service) runHere(ctx context.Context, c *event.ToolCall, redelivered bool, at placed) error {
	res := event.ToolCompleted{
		Header:  event.NewHeader(event.TypeToolCompleted, c.Tenant, c.Session),
		Call:    c.Call,
		Name:    c.Name,
		Service: bus.ServiceSandbox,
		User:    c.User,
	}
	// The mark is set and checked under the session's lock: calls of a
	// session run one at a time, and a second copy of a call waits here
	// until the first has recorded its result.
	key := bus.SessionKey(c.Tenant, c.Session)
	unlock, err := s.sessions.Lock(ctx, key)
	if err != nil {
		return err
	}
	defer unlock()
	if s.snaps != nil {
		// Whether the workspace matches its snapshot is written on disk
		// once the result is out, off its path (see snapshots.clean).
		defer s.snaps.settle(c.Tenant, c.Session)
	}
	if !s.place.owns(key) {
		// Released while this call waited (the reaper, a stop, a lapse
		// of the node's lease): deliver it again, to be placed afresh.
		return bus.NotYet(0, fmt.Errorf("session %s is no longer placed here", c.Session))
	}
	if c.Name == event.PrepareTool {
		return s.runPrepare(ctx, c)
	}
	// Brought up to date before the call is marked as started, so that a
	// failure here leaves a call that certainly did not run. moved says
	// this delivery restored the workspace (or laid out a fork's); its
	// note is kept until a result tells it (see rebuilt.go).
	moved, err := s.syncWorkspace(ctx, c, at)
	if err != nil {
		return err
	}
	// The vaults its first request restricts the session to go with it
	// to egress: the sandbox gets no other vault's credentials.
	env, err := s.environmentOf(ctx, c.Tenant, c.Session)
	if err != nil {
		return err
	}
	// Until its snapshot is taken, the workspace here may be ahead of the
	// last one: a restart over it keeps it. Noted while the call is
	// marked as started, before it runs, and taken back if it does not.
	var (
		noting         sync.WaitGroup
		noted, running bool
	)
	if mayChange(c.Name) && s.snaps != nil {
		noting.Go(func() { noted = s.snaps.ahead(c.Tenant, c.Session, at.rev) })
	}
	defer func() {
		noting.Wait()
		if noted && !running {
			s.snaps.notRun(c.Tenant, c.Session)
		}
	}()
	if repeatable(c.Name) {
		// Safe to run twice, so not marked: a copy delivered again runs
		// again, unless its result is recorded already.
		if redelivered {
			done, err := s.recorded(ctx, c)
			if err != nil || done {
				return err
			}
		}
	} else {
		rctx, rcancel := bus.Bound(ctx)
		_, err = s.calls.Create(rctx, bus.CallKey(c.Tenant, c.Session, c.Call), []byte(s.cfg.Instance))
		rcancel()
		if err != nil {
			if !errors.Is(err, jetstream.ErrKeyExists) {
				return fmt.Errorf("mark call %s: %w", c.Call, err)
			}
			done, err := s.recorded(ctx, c)
			if err != nil || done {
				return err
			}
			res.Output, res.IsError = interrupted, true
			if moved != "" {
				res.Output = interruptedRestored
			}
			return s.recordNoted(ctx, c, &res)
		}
	}
	args, err := tool.Parse(c.Name, c.Input)
	if err != nil {
		res.Output, res.IsError = "Error: "+err.Error(), true
		return s.recordNoted(ctx, c, &res)
	}
	callCtx, done, stopped := s.stops.start(ctx, key)
	if stopped != "" {
		res.Output, res.IsError = "Not run: "+stopped+".", true
		return s.recordNoted(ctx, c, &res)
	}
	defer done()
	noting.Wait()
	running = true
	start := time.Now()
	r, err := s.driver.RunWithOutput(callCtx, egressapi.Identity{Tenant: c.Tenant, User: c.User, Session: c.Session, Vaults: env.vaults}, args, s.liveOutput(c))
	if r.NewSandbox {
		// Kept whatever becomes of the call: its result, or the next one
		// recorded, tells the model.
		if err := s.notes.keep(c.Tenant, c.Session, newSandboxNote); err != nil {
			s.log.WarnContext(ctx, "note of a new sandbox", "session", c.Session, "err", err)
		}
	}
	if errors.Is(context.Cause(callCtx), errStopped) && ctx.Err() == nil {
		s.metrics.calls.WithLabelValues(metrics.Tool(c.Name), "killed").Observe(time.Since(start).Seconds())
		res.Output, res.IsError = "Killed: the session was stopped while this call ran.", true
		return s.recordNoted(ctx, c, &res)
	}
	if err == nil {
		outcome := "ok"
		if r.IsError {
			outcome = "error"
		}
		s.metrics.calls.WithLabelValues(metrics.Tool(c.Name), outcome).Observe(time.Since(start).Seconds())
	}
	if ctx.Err() != nil {
		// Stopped under the call (shutdown): no result is recorded, and the
		// redelivery finds the call marked as started.
		return fmt.Errorf("run %s call %s: %w", c.Name, c.Call, ctx.Err())
	}
	if err != nil {
		if errors.Is(err, sandbox.ErrNotRun) && !repeatable(c.Name) {
			// Certainly not run: unmarked, so that its next delivery runs
			// it rather than report it interrupted.
			err = errors.Join(err, s.unmark(ctx, c))
		}
		return fmt.Errorf("run %s call %s: %w", c.Name, c.Call, err)
	}
	res.Output, res.IsError, res.ExitCode = r.Output, r.IsError, r.ExitCode
	res.Egress = r.Egress
	if c.Name == tool.Bash {
		res.Output = noteSkillsWrite(res.Output)
	}
	if mayChange(c.Name) {
		if msg := s.snapshot(ctx, c, at); msg != "" {
			res.IsError = true
			res.Output += "\nError: " + msg
		} else if s.snaps != nil {
			// What the session's answer says it changed, kept current.
			ch, err := s.snaps.changes(ctx, c.Tenant, c.Session)
			if err != nil {
				s.log.WarnContext(ctx, "changes since the workspace's base", "session", c.Session, "err", err)
			}
			res.Changes = ch
		}
	}
	res.Truncated, res.TimedOut, res.DurationMS = r.Truncated, r.TimedOut, r.Duration.Milliseconds()
	s.log.DebugContext(ctx, "toolcall finished", "call", c.Call, "tool", c.Name, "is_error", r.IsError, "duration", r.Duration)
	err = s.recordNoted(ctx, c, &res)
	// The reaper keeps a workspace while its session uses it: touched
	// once the result is out.
	now := time.Now()
	_ = os.Chtimes(s.driver.Workspace(c.Tenant, c.Session), now, now)
	return err
}

// unmark forgets that call c was started, so that its next delivery runs
// it: only for a call that certainly did not run.
func (s *Service) unmark(ctx context.Context, c *event.ToolCall) error {
	rctx, cancel := bus.Bound(ctx)
	defer cancel()
	if err := s.calls.Delete(rctx, bus.CallKey(c.Tenant, c.Session, c.Call)); err != nil {
		return fmt.Errorf("unmark call %s: %w", c.Call, err)
	}
	return nil
}

// recorded reports whether the call's result is in its session's log:
// one the sandbox wrote, for the call the harness dispatched to it (the
// log's verified read); anything else in the log under the call's ID is
// no result of ours.
func (s *Service) recorded(ctx context.Context, c *event.ToolCall) (bool, error) {
	entries, _, err := s.logs.ReadAll(ctx, c.Tenant, c.Session)
	if err != nil {
		return false, err
	}
	for _, e := range entries {
		if r, ok := e.Event.(*event.ToolCompleted); ok && e.Writer == sessionlog.Sandbox && r.Call == c.Call {
			return true, nil
		}
	}
	return false, nil
}

// record records call c's result, after the note for the model, if any,
// that its session's workspace was restored or seeded before it.
func (s *Service) record(ctx context.Context, c *event.ToolCall, r *event.ToolCompleted, note string) error {
	if note != "" {
		r.Output = note + "\n" + r.Output
	}
	return s.logs.RecordResult(ctx, r, c)
}

// recordNoted records call c's result after the note its session's model
// is still to be told of its sandbox's rebuilding, if any, which is
// forgotten once the result is recorded.
func (s *Service) recordNoted(ctx context.Context, c *event.ToolCall, r *event.ToolCompleted) error {
	note := s.notes.pending(c.Tenant, c.Session)
	if err := s.record(ctx, c, r, note); err != nil {
		return err
	}
	if note != "" {
		s.notes.told(c.Tenant, c.Session, note)
	}
	return nil
}

// forkOf returns the session a session's first request forked, if any: the
// first request the harness recorded, never one written by anyone else.
func (s *Service) forkOf(ctx context.Context, tenant string, session uuid.UUID) (uuid.UUID, error) {
	e, ok, err := s.logs.First(ctx, tenant, session, event.TypeSessionRequested)
	if err != nil {
		return uuid.Nil, fmt.Errorf("read the first request of %s: %w", session, err)
	}
	if !ok {
		return uuid.Nil, nil
	}
	r, ok := e.Event.(*event.SessionRequested)
	if !ok {
		return uuid.Nil, nil
	}
	return r.Fork, nil
}

// snapshot takes the snapshot of the session's workspace after a call
// that may have changed it, holding it to its bounds, and returns what the
// model must be told if it failed ("" if it did not).
func (s *Service) snapshot(ctx context.Context, c *event.ToolCall, at placed) string {
	dir := s.driver.Workspace(c.Tenant, c.Session)
	lim := limits{bounds: bounds{files: s.cfg.WorkspaceFiles, bytes: s.cfg.WorkspaceBytes}, stored: s.cfg.SnapshotBytes}
	if s.snaps == nil {
		if _, err := workspaceSize(dir, lim.bounds); err != nil {
			return err.Error() + "."
		}
		return ""
	}
	start := time.Now()
	_, size, err := s.snaps.take(ctx, c.Tenant, c.Session, dir, lim)
	if err == nil {
		s.metrics.snapshots.Observe(time.Since(start).Seconds())
		s.metrics.snapshotBytes.Observe(float64(size))
		return ""
	}
	// The workspace here is still whole, and newer than the last
	// snapshot: it is kept over a restart, and the next call snapshots
	// it again. Another node taking the session over starts from the
	// snapshot before.
	s.snaps.failed(c.Tenant, c.Session, at.rev)
	if errors.Is(err, errBound) {
		return err.Error() + ". Until then the workspace is not snapshotted: it is kept on this node only."
	}
	s.log.WarnContext(ctx, "snapshot", "session", c.Session, "err", err)
	if unreachable(err) {
		// The bus is down or restarting: nothing the model did or can
		// do, and the next call snapshots the workspace again.
		return ""
	}
	if storeFull(err) {
		return "the workspace could not be snapshotted: the store of snapshots is full (its bound is CORRAL_NATS_WORKSPACES_BYTES; files no snapshot names are collected after CORRAL_SANDBOX_BLOB_GRACE). It is whole on this node and the next call snapshots it again; keeping the workspace small helps."
	}
	return "the workspace could not be snapshotted (" + err.Error() + "). It is whole on this node and the next call snapshots it again; if this node is lost first, the session goes on from the last snapshot."
}

// storeFull reports whether err is the object store's refusal of more
// bytes than its bound (JetStream's store failed, or insufficient
// resources).
func storeFull(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == 10077 || apiErr.ErrorCode == 10047)
}

// syncWorkspace brings the session's workspace here up to its last
// snapshot when it is behind: the session ran on another node since (which
// may have died), or this one restarted. It returns a note for the model
// when it restored one. A session that stayed placed here since this node
// took its last snapshot is not behind: no other node ran it. Nor is one
// whose last snapshot here failed while it was placed here at the very
// placement it has now: its workspace here is newer than any snapshot.
func (s *Service) syncWorkspace(ctx context.Context, c *event.ToolCall, at placed) (string, error) {
	if s.snaps == nil || !at.fresh && s.snaps.known(c.Tenant, c.Session) {
		return "", nil
	}
	seq, taken, err := s.snaps.latest(ctx, c.Tenant, c.Session)
	if err != nil {
		return "", err
	}
	if rev, ok := s.snaps.failedAt(c.Tenant, c.Session); ok && rev == at.rev {
		if _, err := os.Stat(s.driver.Workspace(c.Tenant, c.Session)); err == nil {
			s.snaps.mark(c.Tenant, c.Session, seq) // taken again at the next call
			return "", nil
		}
	}
	var note string
	if seq == 0 {
		// No snapshot yet: a new session, which may be a fork.
		fork, err := s.forkOf(ctx, c.Tenant, c.Session)
		if err != nil {
			return "", err
		}
		if fork == uuid.Nil {
			s.snaps.mark(c.Tenant, c.Session, 0)
			return "", nil
		}
		if seq, err = s.snaps.fork(ctx, c.Tenant, fork, c.Session); err != nil {
			return "", err
		}
		note = fmt.Sprintf("Note: this session is a fork of session %s: /workspace starts as that session's workspace was at its last snapshot.", fork)
		if seq == 0 {
			note = fmt.Sprintf("Note: this session is a fork of session %s, which had no files in /workspace to start from.", fork)
			if err := s.notes.keep(c.Tenant, c.Session, note); err != nil {
				return "", err
			}
			s.snaps.mark(c.Tenant, c.Session, 0)
			return note, nil
		}
	}
	if s.snaps.current(c.Tenant, c.Session, seq) {
		return "", nil
	}
	if note == "" {
		note = restoredNote(taken)
	}
	// Kept before the workspace changes: a call that fails from here on
	// and is delivered here again tells it, restored again or not. Until
	// it is whole, the workspace matches no snapshot, and such a call
	// restores it.
	if err := s.notes.keep(c.Tenant, c.Session, note); err != nil {
		return "", err
	}
	s.snaps.forget(bus.SessionKey(c.Tenant, c.Session))
	start := time.Now()
	// The sandbox here, if any, ran on a workspace that is out of date.
	if err := s.driver.Destroy(ctx, c.Tenant, c.Session); err != nil {
		return "", err
	}
	if _, err := s.snaps.restore(ctx, c.Tenant, c.Session, s.driver.Workspace(c.Tenant, c.Session)); err != nil {
		return "", err
	}
	s.metrics.restores.Observe(time.Since(start).Seconds())
	s.log.InfoContext(ctx, "workspace restored from its snapshot", "session", c.Session, "seq", seq)
	return note, nil
}

// unreachable reports whether err is the bus being out of reach (a server
// restarting, a connection lost), not anything about the workspace.
func unreachable(err error) bool {
	for _, e := range []error{nats.ErrDisconnected, nats.ErrConnectionReconnecting, nats.ErrConnectionClosed, nats.ErrTimeout,
		nats.ErrNoResponders, jetstream.ErrNoStreamResponse, context.DeadlineExceeded} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
