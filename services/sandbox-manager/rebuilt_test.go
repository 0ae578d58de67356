package sandboxmanager

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/natstest"
	"corral.dev/services/sandbox-manager/internal/sandbox"
)

// A call that fails after its workspace was restored, before its result
// is recorded, leaves the note of the restore pending: delivered again to
// the same node, which finds the workspace up to date and restores
// nothing, it still tells the model its workspace was rolled back, once.
// So does a call stopped under it, reported as interrupted.
func TestRestoredNoteOutlivesAFailedCall(t *testing.T) {
	_, _, js := natstest.Run(t)
	ctx := context.Background()
	a := newNode(t, js, nil)
	t.Cleanup(a.driver.Close)
	session := uuid.Must(uuid.NewV7())
	resultOf := func(m bus.Msg) string {
		t.Helper()
		var c event.ToolCall
		if err := json.Unmarshal(m.Data, &c); err != nil {
			t.Fatal(err)
		}
		for _, r := range results(t, js, "acme", session) {
			if r.Call == c.Call {
				return r.Output
			}
		}
		return ""
	}
	run := func(command string) string {
		t.Helper()
		m := callMsg(t, js, session, command)
		if err := a.handleCall(ctx, m); err != nil {
			t.Fatalf("%s: %v", command, err)
		}
		return resultOf(m)
	}
	// The workspace here goes (as the reaper removes an idle one): the
	// next call restores it from its snapshot.
	removed := func() {
		t.Helper()
		if err := a.driver.Destroy(ctx, "acme", session); err != nil {
			t.Fatal(err)
		}
		a.snaps.gone("acme", session)
		a.notes.drop("acme", session)
	}
	restored := "Note: this session's sandbox was rebuilt since its last call"

	if out := run("echo one > f; echo two > g"); out != "" {
		t.Fatalf("the first call: %q", out)
	}
	removed()
	// The call's sandbox cannot start (the tenant's skills cannot be
	// read): certainly not run, it is delivered again.
	skills := bus.SkillsFiles("acme")
	if _, err := a.skills.PutBytes(ctx, skills, []byte("{")); err != nil {
		t.Fatal(err)
	}
	m := callMsg(t, js, session, "cat f")
	if err := a.handleCall(ctx, m); !errors.Is(err, sandbox.ErrNotRun) {
		t.Fatalf("the call whose sandbox cannot start: %v, want an error wrapping ErrNotRun", err)
	}
	if out := resultOf(m); out != "" {
		t.Fatalf("the call that failed has a result: %q", out)
	}
	if err := a.skills.Delete(ctx, skills); err != nil {
		t.Fatal(err)
	}
	m.Delivered = 2
	if err := a.handleCall(ctx, m); err != nil {
		t.Fatalf("the call delivered again: %v", err)
	}
	if out := resultOf(m); !strings.HasPrefix(out, restored) || !strings.HasSuffix(out, "\none\n") {
		t.Errorf("the call delivered again: %q, want the note of the restore, then its output", out)
	}
	if out := run("cat g"); out != "two\n" {
		t.Errorf("the call after: %q, want its output alone: the note is told once", out)
	}
	if _, err := os.Stat(a.notes.file("acme", session)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the note told is still on disk: %v", err)
	}

	// A call stopped under it (its node shutting down) after a restore:
	// delivered again, it is reported as interrupted, after the note.
	removed()
	m = callMsg(t, js, session, "sleep 30")
	var c event.ToolCall
	if err := json.Unmarshal(m.Data, &c); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	failed := make(chan error, 1)
	go func() { failed <- a.handleCall(cctx, m) }()
	natstest.WaitFor(t, 15*time.Second, func() error {
		// Marked as started: restored, and running.
		_, err := a.calls.Get(ctx, bus.CallKey("acme", session, c.Call))
		return err
	})
	cancel()
	if err := <-failed; err == nil {
		t.Fatal("the call stopped under it: no error")
	}
	m.Delivered = 2
	if err := a.handleCall(ctx, m); err != nil {
		t.Fatalf("the stopped call delivered again: %v", err)
	}
	if out := resultOf(m); !strings.HasPrefix(out, restored) || !strings.Contains(out, "\n"+interrupted) {
		t.Errorf("the stopped call delivered again: %q, want the note of the restore, then that it was interrupted", out)
	}
}

// A note from a restore replaces a pending note of a new sandbox, never
// the other way round; a note is kept on disk until told, and read back
// at a restart.
func TestPendingNotes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	n, err := newPendingNotes(dir)
	if err != nil {
		t.Fatal(err)
	}
	s1, s2 := uuid.New(), uuid.New()
	restored := restoredNote(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	for _, note := range []string{restored, newSandboxNote} {
		if err := n.keep("acme", s1, note); err != nil {
			t.Fatal(err)
		}
	}
	for _, note := range []string{newSandboxNote, restored} {
		if err := n.keep("acme", s2, note); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []uuid.UUID{s1, s2} {
		if got := n.pending("acme", s); got != restored {
			t.Errorf("pending %s: %q, want the restore's note", s, got)
		}
	}
	if got := n.pending("globex", s1); got != "" {
		t.Errorf("another tenant's session of the same ID has the note %q", got)
	}
	n.told("acme", s1, newSandboxNote) // not the note pending: kept
	n.told("acme", s2, restored)
	again, err := newPendingNotes(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := again.pending("acme", s1); got != restored {
		t.Errorf("after a restart, pending %s: %q, want the restore's note", s1, got)
	}
	if got := again.pending("acme", s2); got != "" {
		t.Errorf("after a restart, the note told is pending: %q", got)
	}
	again.drop("acme", s1)
	if _, err := os.Stat(again.file("acme", s1)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a note dropped is still on disk: %v", err)
	}
}
