package sandboxmanager

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
)

// A model is told when its sandbox was rebuilt: its workspace restored
// from a snapshot (or a fork's laid out), or a Bash call run in a new
// sandbox on a workspace kept. The note goes with the next result
// recorded, whichever call's it is. It is kept on disk until then, from
// before the workspace it tells of is used: a call that fails after a
// restore, or a node that stops, and whose call is delivered again here,
// finds the workspace up to date and restores nothing, yet the note is
// still told. A call delivered again to another node restores there, and
// that node makes its note.

// pendingNotes keeps, by session, the note its model is still to be told
// of its sandbox's rebuilding: in memory, and in a file of dir,
// <tenant>/<session>, read back at start.
type pendingNotes struct {
	dir   string
	mu    sync.Mutex
	notes map[string]string // by [bus.SessionKey]
}

// newPendingNotes returns the notes kept in dir, made if need be.
func newPendingNotes(dir string) (*pendingNotes, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	files, err := filepath.Glob(filepath.Join(dir, "*", "*"))
	if err != nil {
		return nil, err
	}
	n := &pendingNotes{dir: dir, notes: make(map[string]string)}
	for _, p := range files {
		tenant := filepath.Base(filepath.Dir(p))
		session, err := uuid.Parse(filepath.Base(p))
		if err != nil || event.CheckTenant(tenant) != nil {
			continue // a file being written, renamed at once after
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		if len(data) > 0 {
			n.notes[bus.SessionKey(tenant, session)] = string(data)
		}
	}
	return n, nil
}

// keep keeps note as the pending note of the session, in memory even when
// it could not be written to disk, which the error says. A note from a
// restore replaces any note pending; [newSandboxNote] replaces none: a
// restore's note says all it says, and more.
func (n *pendingNotes) keep(tenant string, session uuid.UUID, note string) error {
	key := bus.SessionKey(tenant, session)
	n.mu.Lock()
	defer n.mu.Unlock()
	if have, ok := n.notes[key]; ok && (have == note || note == newSandboxNote) {
		return nil
	}
	n.notes[key] = note
	p := n.file(tenant, session)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return fmt.Errorf("keep the note of %s: %w", session, err)
	}
	// Written whole or not at all: a note cut short at a crash would be
	// told as it is.
	tmp := p + ".tmp"
	err := os.WriteFile(tmp, []byte(note), 0o600)
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("keep the note of %s: %w", session, err)
	}
	return nil
}

// pending returns the session's pending note, "" if none.
func (n *pendingNotes) pending(tenant string, session uuid.UUID) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.notes[bus.SessionKey(tenant, session)]
}

// told forgets the session's pending note once a result recorded holds
// it, unless another note replaced it meanwhile.
func (n *pendingNotes) told(tenant string, session uuid.UUID, note string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.notes[bus.SessionKey(tenant, session)] == note {
		n.dropLocked(tenant, session)
	}
}

// drop forgets the session's pending note: its workspace here is gone,
// and whichever call comes next restores it, with a note of its own.
func (n *pendingNotes) drop(tenant string, session uuid.UUID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.dropLocked(tenant, session)
}

func (n *pendingNotes) dropLocked(tenant string, session uuid.UUID) {
	key := bus.SessionKey(tenant, session)
	if _, ok := n.notes[key]; !ok {
		return
	}
	delete(n.notes, key)
	// A file that stays is read back at a restart, and its note told
	// once more: better than never.
	_ = os.Remove(n.file(tenant, session))
}

// file is where the pending note of a session is kept, per tenant: one
// tenant's session ID may be another's.
func (n *pendingNotes) file(tenant string, session uuid.UUID) string {
	return filepath.Join(n.dir, tenant, session.String())
}

// restoredNote is what the model is told with the first result after its
// session's sandbox was rebuilt from the workspace's last snapshot, which
// was written at taken. It names no one cause, since this node does not
// know which it was: the workspace here was removed (idle past
// CORRAL_SANDBOX_WORKSPACE_TTL, or its session was stopped or failed), the
// session moved from another node, or this node restarted.
func restoredNote(taken time.Time) string {
	from := "its last snapshot"
	if !taken.IsZero() {
		from += ", written at " + taken.UTC().Format("2006-01-02 15:04:05 UTC")
	}
	return "Note: this session's sandbox was rebuilt since its last call (its workspace had been removed while idle or when the session was stopped, " +
		"or the session moved to another node, or its node restarted): /workspace was restored from " + from + ". " +
		"Whatever changed in /workspace after that snapshot is gone, and so is everything outside /workspace (/tmp, /home/sandbox)."
}

// newSandboxNote is what the model is told with the result of a Bash call
// that ran in a new sandbox on its session's workspace, the one before
// being gone: nothing of /workspace was lost, but the rest of the
// sandbox's files were.
const newSandboxNote = "Note: this command ran in a new sandbox: this session's previous one was stopped since its last command " +
	"(idle for a while, its request done, or lost). /workspace is as the last call left it, " +
	"but /tmp, /dev/shm and /home/sandbox started empty again: whatever was put there before is gone."
