package sandboxmanager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/sessionlog"
)

// A session ID is the client's choice, so tenant acme can name a session
// of tenant beta; what a message's body says of tenant and session is
// never believed. These tests are the attacks of issue 17.

// running reports whether a call of a session of tenant runs on svc.
func running(svc *Service, tenant string, session uuid.UUID) bool {
	svc.stops.mu.Lock()
	defer svc.stops.mu.Unlock()
	_, ok := svc.stops.running[bus.SessionKey(tenant, session)]
	return ok
}

// stoppedHere reports whether svc read a stop of a session of tenant.
func stoppedHere(svc *Service, tenant string, session uuid.UUID) bool {
	svc.stops.mu.Lock()
	defer svc.stops.mu.Unlock()
	_, ok := svc.stops.stopped[bus.SessionKey(tenant, session)]
	return ok
}

// stopSession records a stop of a session, as the harness does for the
// session's user.
func stopSession(t *testing.T, js jetstream.JetStream, tenant string, session uuid.UUID) {
	t.Helper()
	record(t, js, sessionlog.Harness, &event.SessionStopped{Header: event.NewHeader(event.TypeSessionStopped, tenant, session), By: "ada"})
}

// resultOf returns the result of call among rs.
func resultOf(t *testing.T, rs []event.ToolCompleted, call uuid.UUID) event.ToolCompleted {
	t.Helper()
	for _, r := range rs {
		if r.Call == call {
			return r
		}
	}
	t.Fatalf("no result of call %s among %d", call, len(rs))
	return event.ToolCompleted{}
}

// A stop published under one tenant's subject whose body names another
// tenant's session neither kills that session's running call nor touches
// its workspace: the watcher acts on the tenant and session of the
// subject, and only on an event the log accepts.
func TestStopOfAnotherTenantsSessionIsIgnored(t *testing.T) {
	_, _, js := natstest.Run(t)
	svc, _ := startNode(t, js, nil)
	victim := uuid.Must(uuid.NewV7())
	call := uuid.Must(uuid.NewV7())
	dispatchIn(t, js, "beta", victim, call, "Bash", `{"command":"touch started; sleep 4; echo done"}`, "victim")
	natstest.WaitFor(t, 15*time.Second, func() error {
		if !running(svc, "beta", victim) {
			return errors.New("beta's call is not running")
		}
		return nil
	})

	// Stops of beta's session, each on a subject of acme's: of one of its
	// sessions, and of its own session of the same ID.
	forged := event.SessionStopped{Header: event.NewHeader(event.TypeSessionStopped, "beta", victim), By: "mallory"}
	natstest.Forge(t, js, sessionlog.Subject("acme", uuid.Must(uuid.NewV7()), event.TypeSessionStopped, sessionlog.Harness), &forged)
	natstest.Forge(t, js, sessionlog.Subject("acme", victim, event.TypeSessionStopped, sessionlog.Harness), &forged)
	// A stop recorded after them: once it is read, so were they.
	barrier := uuid.Must(uuid.NewV7())
	stopSession(t, js, "acme", barrier)
	natstest.WaitFor(t, 10*time.Second, func() error {
		if !stoppedHere(svc, "acme", barrier) {
			return errors.New("the stop after the forged ones is not read yet")
		}
		return nil
	})
	if stoppedHere(svc, "beta", victim) {
		t.Error("beta's session is stopped here")
	}
	if !running(svc, "beta", victim) {
		t.Error("beta's call no longer runs after the forged stops")
	}

	r := resultOf(t, resultsIn(t, js, "beta", victim, 1), call)
	if r.IsError || strings.TrimSpace(r.Output) != "done" {
		t.Errorf("beta's call = %+v; want it run to its end", r)
	}
	if _, err := os.Stat(filepath.Join(svc.driver.Workspace("beta", victim), "started")); err != nil {
		t.Errorf("beta's workspace: %v; want it kept", err)
	}
}

// A tool call on the subject of a session of acme whose body names a
// session of beta is rejected, whether it comes from the queue or is
// forwarded by another node: it runs nothing anywhere, and it is
// dead-lettered without an error result in either session.
func TestToolCallNamingAnotherTenantIsRejected(t *testing.T) {
	_, _, js := natstest.Run(t)
	ctx := context.Background()
	svc, _ := startNode(t, js, nil)
	victim := uuid.Must(uuid.NewV7())
	call := uuid.Must(uuid.NewV7())
	// A call of beta's dispatched to the sandbox, so that a result of it
	// would be believed.
	responded(t, js, "beta", victim, call, "Bash")
	c := signed(event.ToolCall{Header: event.NewHeader(event.TypeToolCall, "beta", victim), Call: call, Turn: 1, User: "ada", Name: "Bash", Input: json.RawMessage(`{"command":"touch pwned"}`)})
	data, err := json.Marshal(&c)
	if err != nil {
		t.Fatal(err)
	}
	subject := bus.ToolSubject(bus.ServiceSandbox, "acme", victim)
	m := bus.Msg{Subject: subject, Data: data, Delivered: 1}

	if err := svc.handleCall(ctx, m); !errors.Is(err, bus.ErrRejected) {
		t.Errorf("handleCall = %v, want it rejected", err)
	}
	if err := svc.runForwarded(ctx, m); !errors.Is(err, bus.ErrRejected) {
		t.Errorf("runForwarded = %v, want it rejected", err)
	}
	if err := bus.Publish(ctx, js, subject, "forged", &c); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 15*time.Second, func() error {
		dead, err := bus.ReadAll(ctx, js, bus.StreamDeadLetter, "deadletter."+bus.StreamTools+".>")
		if err != nil {
			return err
		}
		if len(dead) == 0 {
			return errors.New("the forged call is not dead-lettered")
		}
		return nil
	})
	for _, tenant := range []string{"acme", "beta"} {
		if _, err := os.Stat(svc.driver.Workspace(tenant, victim)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the workspace of %s's session: %v; want none", tenant, err)
		}
		if rs := results(t, js, tenant, victim); len(rs) != 0 {
			t.Errorf("%s's session has results %+v; want none", tenant, rs)
		}
	}
}

// Two tenants' sessions of the same ID are two sessions: their calls run
// at once, each in its own workspace, and a stop of one leaves the other
// running, and free to take calls.
func TestSameSessionIDInTwoTenants(t *testing.T) {
	_, _, js := natstest.Run(t)
	ctx := context.Background()
	svc, _ := startNode(t, js, nil)
	session := uuid.Must(uuid.NewV7())

	// Placed here as one tenant's, the session is not placed here as the
	// other's.
	if _, err := svc.place.route(ctx, "acme", session); err != nil {
		t.Fatal(err)
	}
	if svc.place.owns(bus.SessionKey("beta", session)) {
		t.Error("beta's session is placed here when acme's is")
	}
	if at, err := svc.place.route(ctx, "beta", session); err != nil || !at.fresh {
		t.Errorf("placing beta's session = %+v, %v; want it placed afresh", at, err)
	}

	// Each call marks its workspace while it runs: both marks at once
	// show the two calls ran at once, under locks of their own.
	acme, beta := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	dispatchIn(t, js, "acme", session, acme, "Bash", `{"command":"echo acme > who; touch running; sleep 30"}`, "acme")
	dispatchIn(t, js, "beta", session, beta, "Bash", `{"command":"echo beta > who; touch running; sleep 4; rm running; cat who"}`, "beta")
	natstest.WaitFor(t, 15*time.Second, func() error {
		for _, tenant := range []string{"acme", "beta"} {
			if _, err := os.Stat(filepath.Join(svc.driver.Workspace(tenant, session), "running")); err != nil {
				return fmt.Errorf("%s's call is not running: %v", tenant, err)
			}
		}
		return nil
	})

	stopSession(t, js, "acme", session)
	if r := resultOf(t, resultsIn(t, js, "acme", session, 1), acme); !strings.HasPrefix(r.Output, "Killed") {
		t.Errorf("acme's call = %+v; want it killed", r)
	}
	if r := resultOf(t, resultsIn(t, js, "beta", session, 1), beta); r.IsError || strings.TrimSpace(r.Output) != "beta" {
		t.Errorf("beta's call = %+v; want it run to its end in its own workspace", r)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if _, err := os.Stat(svc.driver.Workspace("acme", session)); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("acme's workspace: %v; want it destroyed", err)
		}
		return nil
	})

	next := uuid.Must(uuid.NewV7())
	dispatchIn(t, js, "beta", session, next, "Bash", `{"command":"cat who"}`, "beta-next")
	if r := resultOf(t, resultsIn(t, js, "beta", session, 2), next); r.IsError || strings.TrimSpace(r.Output) != "beta" {
		t.Errorf("beta's call after acme's stop = %+v; want it run on its workspace", r)
	}
}

// The notes of failed snapshots are per tenant; an older version's note,
// kept by session alone, is moved to the one tenant with a workspace of
// that session here, and dropped when it could stand for several.
func TestFailedSnapshotNotesArePerTenant(t *testing.T) {
	_, _, js := natstest.Run(t)
	notes, workspaces := t.TempDir(), t.TempDir()
	s, err := newSnapshots(context.Background(), js, notes, workspaces, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	session := uuid.Must(uuid.NewV7())
	s.failed("acme", session, 3)
	if s.isDirty("beta", session) {
		t.Error("beta's session is noted when acme's snapshot failed")
	}

	only, shared := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	for _, w := range []string{"beta/" + only.String(), "acme/" + shared.String(), "beta/" + shared.String()} {
		if err := os.MkdirAll(filepath.Join(workspaces, w), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []uuid.UUID{only, shared} {
		if err := os.WriteFile(filepath.Join(notes, id.String()), []byte("5"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	again, err := newSnapshots(context.Background(), js, notes, workspaces, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		tenant  string
		session uuid.UUID
		rev     uint64
		dirty   bool
	}{
		{"acme", session, 3, true},
		{"beta", session, 0, false},
		{"beta", only, 5, true},
		{"acme", only, 0, false},
		{"acme", shared, 0, false},
		{"beta", shared, 0, false},
	}
	for _, tc := range tests {
		rev, dirty := again.failedAt(tc.tenant, tc.session)
		if rev != tc.rev || dirty != tc.dirty {
			t.Errorf("failedAt(%s, %s) = %d, %v; want %d, %v", tc.tenant, tc.session, rev, dirty, tc.rev, tc.dirty)
		}
	}
	for _, id := range []uuid.UUID{only, shared} {
		if _, err := os.Stat(filepath.Join(notes, id.String())); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the old note of %s: %v; want it gone", id, err)
		}
	}
}

// A note stays on disk while its workspace is here and says whether the
// workspace is ahead of its snapshot: a node restarted after a call's
// snapshot was taken and its result recorded (settle) reads it as up to
// date, one restarted before as ahead; the note goes with the workspace.
func TestNoteSaysWhetherTheWorkspaceIsAhead(t *testing.T) {
	_, _, js := natstest.Run(t)
	notes, workspaces := t.TempDir(), t.TempDir()
	open := func() *snapshots {
		t.Helper()
		s, err := newSnapshots(context.Background(), js, notes, workspaces, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	session := uuid.Must(uuid.NewV7())
	s := open()
	s.ahead("acme", session, 4)
	if rev, dirty := open().failedAt("acme", session); !dirty || rev != 4 {
		t.Errorf("after a call began: failedAt = %d, %v; want 4, true", rev, dirty)
	}
	s.mu.Lock()
	s.clean("acme", session)
	s.mu.Unlock()
	if rev, dirty := open().failedAt("acme", session); !dirty || rev != 4 {
		t.Errorf("after its snapshot, before its result: failedAt = %d, %v; want 4, true (a restart keeps the workspace)", rev, dirty)
	}
	if rev, dirty := s.failedAt("acme", session); dirty {
		t.Errorf("after its snapshot, here: failedAt = %d, %v; want the workspace up to date", rev, dirty)
	}
	s.settle("acme", session)
	if rev, dirty := open().failedAt("acme", session); dirty {
		t.Errorf("after its snapshot and result: failedAt = %d, %v; want the workspace up to date", rev, dirty)
	}
	s.ahead("acme", session, 4)
	if rev, dirty := open().failedAt("acme", session); !dirty || rev != 4 {
		t.Errorf("after the next call began: failedAt = %d, %v; want 4, true", rev, dirty)
	}
	s.ahead("acme", session, 7) // placed here again
	if rev, dirty := open().failedAt("acme", session); !dirty || rev != 7 {
		t.Errorf("placed afresh: failedAt = %d, %v; want 7, true", rev, dirty)
	}
	// A note an older version wrote, the revision alone, is a workspace
	// ahead; it comes and goes as any other.
	old := uuid.Must(uuid.NewV7())
	if err := os.WriteFile(filepath.Join(notes, "acme", old.String()), []byte("12"), 0o644); err != nil {
		t.Fatal(err)
	}
	s = open()
	if rev, dirty := s.failedAt("acme", old); !dirty || rev != 12 {
		t.Errorf("an older version's note: failedAt = %d, %v; want 12, true", rev, dirty)
	}
	s.mu.Lock()
	s.clean("acme", old)
	s.mu.Unlock()
	s.settle("acme", old)
	if rev, dirty := open().failedAt("acme", old); dirty {
		t.Errorf("an older version's note, after a snapshot: failedAt = %d, %v; want the workspace up to date", rev, dirty)
	}
	s.ahead("acme", old, 12)
	if rev, dirty := open().failedAt("acme", old); !dirty || rev != 12 {
		t.Errorf("an older version's note, after the next call began: failedAt = %d, %v; want 12, true", rev, dirty)
	}
	s.gone("acme", session)
	if _, err := os.Stat(filepath.Join(notes, "acme", session.String())); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the note of a workspace gone: %v; want it gone", err)
	}
	if _, dirty := open().failedAt("acme", session); dirty {
		t.Error("a workspace gone is still noted as ahead after a restart")
	}
}

// A call noted as about to change its workspace that then does not run
// (its session stopped, its arguments invalid, its result recorded
// already) leaves the workspace as up to date as it was: clean if it was,
// here and on disk, and still ahead of its snapshot if a snapshot had
// failed before it.
func TestCallNotRunLeavesTheNoteAsItWas(t *testing.T) {
	_, _, js := natstest.Run(t)
	notes, workspaces := t.TempDir(), t.TempDir()
	open := func() *snapshots {
		t.Helper()
		s, err := newSnapshots(context.Background(), js, notes, workspaces, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	clean, failed := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	if !s.ahead("acme", clean, 3) {
		t.Error("ahead of a workspace up to date = false, want true")
	}
	s.notRun("acme", clean)
	s.settle("acme", clean)
	if rev, dirty := s.failedAt("acme", clean); dirty {
		t.Errorf("a call not run: failedAt = %d, %v here; want the workspace up to date", rev, dirty)
	}
	if rev, dirty := open().failedAt("acme", clean); dirty {
		t.Errorf("a call not run: failedAt = %d, %v on disk; want the workspace up to date", rev, dirty)
	}

	s.failed("acme", failed, 5)
	if s.ahead("acme", failed, 5) {
		t.Error("ahead of a workspace whose snapshot failed = true, want false: it was ahead already")
	}
	if rev, dirty := open().failedAt("acme", failed); !dirty || rev != 5 {
		t.Errorf("a failed snapshot, then a call not run: failedAt = %d, %v on disk; want 5, true", rev, dirty)
	}
	// Its session placed here again (the node's lease lapsed meanwhile):
	// a call not run at the new placement leaves it ahead, noted there.
	if s.ahead("acme", failed, 6) {
		t.Error("ahead at a new placement of a workspace whose snapshot failed = true, want false: it was ahead already")
	}
	for _, s := range []*snapshots{s, open()} {
		if rev, dirty := s.failedAt("acme", failed); !dirty || rev != 6 {
			t.Errorf("a failed snapshot, then a call not run at a new placement: failedAt = %d, %v; want 6, true", rev, dirty)
		}
	}
}
