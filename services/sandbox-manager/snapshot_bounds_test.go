package sandboxmanager

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
)

// runCall runs a Bash call of session on svc, as taken from the shared
// queue, and returns its result.
func runCall(t *testing.T, js jetstream.JetStream, svc *Service, session uuid.UUID, command string) event.ToolCompleted {
	t.Helper()
	m := callMsg(t, js, session, command)
	if err := svc.handleCall(context.Background(), m); err != nil {
		t.Fatalf("%s: %v", command, err)
	}
	var c event.ToolCall
	if err := json.Unmarshal(m.Data, &c); err != nil {
		t.Fatal(err)
	}
	for _, r := range results(t, js, "acme", session) {
		if r.Call == c.Call {
			return r
		}
	}
	t.Fatalf("%s: no result", command)
	return event.ToolCompleted{}
}

// storeBytes is what the workspaces bucket holds.
func storeBytes(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	store, err := js.ObjectStore(context.Background(), bus.BucketWorkspaces)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// Each bound on what a session's snapshots hold fails the call that
// crosses it, saying which bound and how to get under it, and stores
// nothing of what crossed it; getting under it lets the next call's
// snapshot through.
func TestSnapshotBounds(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		// calls run in turn; the last crosses the bound.
		calls []string
		want  string
		// under gets the workspace under the bound again.
		under string
	}{
		{
			name:  "sparse file",
			calls: []string{"truncate -s 64M big && truncate -s 64M big2"},
			want:  "is a sparse file",
			under: "rm big big2",
		},
		{
			name:  "many files",
			env:   map[string]string{"CORRAL_SANDBOX_WORKSPACE_FILES": "100"},
			calls: []string{"mkdir d && touch d/f{1..200}"},
			want:  "more than 100 files and directories, over its limit (CORRAL_SANDBOX_WORKSPACE_FILES)",
			under: "rm -r d",
		},
		{
			// The workspace never holds more than 1 MiB, but each call
			// stores a new MiB.
			name: "stored bytes across calls",
			env:  map[string]string{"CORRAL_SANDBOX_SNAPSHOT_BYTES": fmt.Sprint(3 << 20)},
			calls: []string{
				"head -c 1048576 /dev/urandom > a",
				"head -c 1048576 /dev/urandom > a",
				"head -c 1048576 /dev/urandom > a",
				"head -c 1048576 /dev/urandom > a",
			},
			want:  "over their limit of 3145728 bytes an hour (CORRAL_SANDBOX_SNAPSHOT_BYTES)",
			under: "rm a",
		},
		{
			// Content the store holds already (here the session's own;
			// it could be another tenant's) counts all the same, so the
			// bound tells nothing of what others stored.
			name:  "content stored already",
			env:   map[string]string{"CORRAL_SANDBOX_SNAPSHOT_BYTES": fmt.Sprint(2 << 20)},
			calls: []string{"head -c 1572864 /dev/zero > a", "cp a b"},
			want:  "over their limit of 2097152 bytes an hour (CORRAL_SANDBOX_SNAPSHOT_BYTES)",
			under: "rm b",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, _, js := natstest.Run(t)
			svc := newNode(t, js, tc.env)
			t.Cleanup(svc.driver.Close)
			session := uuid.Must(uuid.NewV7())
			for i, command := range tc.calls {
				r := runCall(t, js, svc, session, command)
				last := i == len(tc.calls)-1
				if got := strings.Contains(r.Output, tc.want); got != last || r.IsError != last {
					t.Fatalf("call %d (%s): %+v; want the bound's error only at the last", i, command, r)
				}
			}
			if n := storeBytes(t, js); n > uint64(len(tc.calls)-1)<<20+1<<20 {
				t.Errorf("the store holds %d bytes after the call over the bound", n)
			}
			if r := runCall(t, js, svc, session, tc.under); r.IsError {
				t.Errorf("%s: %s; want the workspace snapshotted again", tc.under, r.Output)
			}
			if svc.snaps.isDirty("acme", session) {
				t.Error("the workspace is still noted as ahead of its snapshot")
			}
		})
	}
}

// A snapshot the full store refuses fails the call, saying so.
func TestSnapshotStoreFull(t *testing.T) {
	_, _, js := natstest.Run(t)
	if err := bus.Setup(context.Background(), js, bus.StoreBytes(bus.BucketWorkspaces, 1<<20)); err != nil {
		t.Fatal(err)
	}
	svc := newNode(t, js, nil)
	t.Cleanup(svc.driver.Close)
	session := uuid.Must(uuid.NewV7())
	r := runCall(t, js, svc, session, "head -c 2097152 /dev/urandom > a")
	if !r.IsError || !strings.Contains(r.Output, "the store of snapshots is full") {
		t.Errorf("a snapshot over the store's bound: %+v", r)
	}
	if r := runCall(t, js, svc, session, "rm a"); r.IsError {
		t.Errorf("after rm: %s; want the workspace snapshotted", r.Output)
	}
}

// A tree deeper than PATH_MAX, made in the sandbox by a loop of mkdir
// and cd, is counted against the workspace's limit and snapshotted, and
// another node restores it; later calls are snapshotted too.
func TestDeepWorkspace(t *testing.T) {
	_, _, js := natstest.Run(t)
	startNode(t, js, map[string]string{"CORRAL_SANDBOX_WORKSPACE_BYTES": "4096"})
	session := uuid.Must(uuid.NewV7())
	bash := func(command string) event.ToolCompleted {
		t.Helper()
		input, err := json.Marshal(map[string]string{"command": command})
		if err != nil {
			t.Fatal(err)
		}
		call := uuid.Must(uuid.NewV7())
		dispatch(t, js, session, call, "Bash", string(input), call.String())
		var r event.ToolCompleted
		natstest.WaitFor(t, 60*time.Second, func() error {
			for _, r = range results(t, js, "acme", session) {
				if r.Call == call {
					return nil
				}
			}
			return errors.New("no result yet")
		})
		return r
	}
	// 11 times 100 levels of "dddd/": 5500 bytes of path.
	deep := strings.Repeat("dddd/", 100)
	loop := `for i in $(seq 11); do mkdir -p ` + deep + ` && cd ` + deep + ` || exit 1; done; `
	if r := bash(loop + "echo deep > f"); r.IsError {
		t.Fatalf("deep call: %s", r.Output)
	}
	if r := bash("echo top > top"); r.IsError {
		t.Fatalf("a later call: %s", r.Output)
	}
	other := newNode(t, js, nil)
	t.Cleanup(other.driver.Close)
	w := filepath.Join(t.TempDir(), "w")
	if _, err := other.snaps.restore(context.Background(), "acme", session, w); err != nil {
		t.Fatalf("restore on another node: %v", err)
	}
	root, err := os.OpenRoot(w)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if data, err := root.ReadFile(strings.Repeat(deep, 11) + "f"); err != nil || string(data) != "deep\n" {
		t.Errorf("restored deep file = %q, %v", data, err)
	}
	// Bytes deep down count against the workspace's limit.
	r := bash(`for i in $(seq 11); do cd ` + deep + ` || exit 1; done; head -c 8192 /dev/zero | tr '\0' x > big`)
	if !r.IsError || !strings.Contains(r.Output, "over its limit (CORRAL_SANDBOX_WORKSPACE_BYTES)") {
		t.Errorf("a deep file over the workspace's limit: %+v", r)
	}
}

// The sweep collects the stored files no manifest names once they are
// older than the grace period, keeps those manifests name, and keeps
// those a snapshot being written names though its manifest is not
// written yet: an old file no manifest named that the snapshot reuses,
// and one it has just uploaded.
func TestSweep(t *testing.T) {
	_, _, js := natstest.Run(t)
	ctx := context.Background()
	const grace = time.Second
	s, err := newSnapshots(ctx, js, t.TempDir(), t.TempDir(), grace)
	if err != nil {
		t.Fatal(err)
	}
	hash := func(content string) string {
		sum := sha256.Sum256([]byte(content))
		return hex.EncodeToString(sum[:])
	}
	stored := func(content string) bool {
		t.Helper()
		_, err := s.store.GetInfo(ctx, "b."+hash(content))
		if err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}
	write := func(dir string, files map[string]string) {
		t.Helper()
		for name, content := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Session one names "a" and "b2"; "b" it named once; "orphan" no
	// manifest ever named.
	one, dir1 := uuid.New(), t.TempDir()
	write(dir1, map[string]string{"a": "a", "b": "b"})
	if _, _, err := s.take(ctx, "acme", one, dir1, limits{}); err != nil {
		t.Fatal(err)
	}
	write(dir1, map[string]string{"b": "b2"})
	if _, _, err := s.take(ctx, "acme", one, dir1, limits{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.store.PutString(ctx, "b."+hash("orphan"), "orphan"); err != nil {
		t.Fatal(err)
	}
	// Session two, snapshotted on another node once "b" and "orphan" are
	// older than the grace period, reuses "b" and uploads "new"; a sweep
	// runs just before its manifest is written.
	other, err := newSnapshots(ctx, js, t.TempDir(), t.TempDir(), grace)
	if err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		_, _, at, err := s.blobMeta(ctx, "b."+hash("orphan"))
		if err != nil {
			return err
		}
		if time.Since(at) <= grace {
			return errors.New("not older than the grace period yet")
		}
		return nil
	})
	two, dir2 := uuid.New(), t.TempDir()
	write(dir2, map[string]string{"b": "b", "c": "new"})
	swept := 0
	other.beforeManifest = func() {
		if swept, err = s.sweep(ctx); err != nil {
			t.Error(err)
		}
	}
	if _, _, err := other.take(ctx, "acme", two, dir2, limits{}); err != nil {
		t.Fatal(err)
	}
	if swept != 1 || stored("orphan") {
		t.Errorf("the sweep collected %d, orphan stored: %v; want the orphan collected", swept, stored("orphan"))
	}
	for _, c := range []string{"a", "b2", "b", "new"} {
		if !stored(c) {
			t.Errorf("%q was collected, though a manifest names it", c)
		}
	}
	for session, want := range map[uuid.UUID]map[string]string{one: {"a": "a", "b": "b2"}, two: {"b": "b", "c": "new"}} {
		w := filepath.Join(t.TempDir(), "w")
		fresh, err := newSnapshots(ctx, js, t.TempDir(), t.TempDir(), grace)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fresh.restore(ctx, "acme", session, w); err != nil {
			t.Errorf("restore %s: %v", session, err)
			continue
		}
		for name, content := range want {
			if data, err := os.ReadFile(filepath.Join(w, name)); err != nil || string(data) != content {
				t.Errorf("restored %s = %q, %v; want %q", name, data, err, content)
			}
		}
	}
}

// A node killed in the middle of a call that wrote to the workspace, and
// restarted over its data, keeps the workspace, with what the call wrote,
// rather than restore the older snapshot over it; the model is told the
// call was interrupted and that /workspace is as it left it, and nothing
// about a restore.
func TestRestartMidCallKeepsTheWorkspace(t *testing.T) {
	_, _, js := natstest.Run(t)
	env := map[string]string{"CORRAL_DATA_DIR": t.TempDir(), "CORRAL_SANDBOX_NODE": "n1"}
	a := newNode(t, js, env)
	t.Cleanup(a.driver.Close)
	session := uuid.Must(uuid.NewV7())
	runCall(t, js, a, session, "echo one > f")

	// The second call writes, then runs on until the node dies under it:
	// no result, no snapshot; its mark stays.
	m := callMsg(t, js, session, "echo two >> f; sleep 60")
	ctx, kill := context.WithCancel(context.Background())
	died := make(chan error, 1)
	go func() { died <- a.handleCall(ctx, m) }()
	f := filepath.Join(a.driver.Workspace("acme", session), "f")
	natstest.WaitFor(t, 10*time.Second, func() error {
		if data, _ := os.ReadFile(f); string(data) != "one\ntwo\n" {
			return fmt.Errorf("f = %q", data)
		}
		return nil
	})
	kill()
	if err := <-died; err == nil {
		t.Fatal("the call finished though its node died")
	}
	a.driver.Close()

	b := newNode(t, js, env) // the same node, restarted over its data
	t.Cleanup(b.driver.Close)
	m.Delivered = 2
	if err := b.handleCall(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	rs := results(t, js, "acme", session)
	if len(rs) != 2 {
		t.Fatalf("%d results, want 2", len(rs))
	}
	if got := rs[1].Output; got != interrupted {
		t.Errorf("the interrupted call's result = %q, want only %q", got, interrupted)
	}
	if r := runCall(t, js, b, session, "cat f"); r.Output != "one\ntwo\n" {
		t.Errorf("after the restart: %q, want what the interrupted call wrote kept", r.Output)
	}
}

// A workspace deeper than maxDepth is refused by the walk that snapshots
// it, which would otherwise hold an open directory per level.
func TestTooDeepWorkspace(t *testing.T) {
	dir := t.TempDir()
	r, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	for range maxDepth {
		if err := r.Mkdir("d", 0o755); err != nil {
			t.Fatal(err)
		}
		sub, err := r.OpenRoot("d")
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		r = sub
	}
	r.Close()
	err = walk(dir, bounds{}, func(*os.Root, string, string, os.FileInfo) error { return nil })
	var be *boundError
	if !errors.As(err, &be) || !strings.Contains(err.Error(), "levels deep") {
		t.Fatalf("walk of a tree %d deep: %v, want the depth bound", maxDepth, err)
	}
}
