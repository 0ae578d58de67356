package sandboxmanager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/natstest"
)

// hasWorkspace reports whether svc holds a workspace of session.
func hasWorkspace(svc *Service, session uuid.UUID) bool {
	_, err := os.Stat(svc.driver.Workspace("acme", session))
	return err == nil
}

func placedOn(t *testing.T, js jetstream.JetStream, session uuid.UUID) string {
	t.Helper()
	kv, err := js.KeyValue(context.Background(), bus.BucketPlacements)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(context.Background(), bus.PlacementKey("acme", session))
	if err != nil {
		t.Fatalf("placement of %s: %v", session, err)
	}
	return string(e.Value())
}

// callMsg is a call as a node receives it from the shared queue; its
// response is recorded, as the harness records it before it dispatches.
func callMsg(t *testing.T, js jetstream.JetStream, session uuid.UUID, command string) bus.Msg {
	t.Helper()
	c := signed(event.ToolCall{Header: event.NewHeader(event.TypeToolCall, "acme", session), Call: uuid.Must(uuid.NewV7()), Turn: 1, User: "ada", Name: "Bash", Input: json.RawMessage(fmt.Sprintf(`{"command":%q}`, command))})
	responded(t, js, "acme", session, c.Call, c.Name)
	data, err := json.Marshal(&c)
	if err != nil {
		t.Fatal(err)
	}
	return bus.Msg{Subject: bus.ToolSubject(bus.ServiceSandbox, "acme", session), Data: data, Delivered: 1}
}

// With two nodes taking calls from the shared queue, every call of a
// session runs on the node the session is placed on, in one workspace:
// calls dispatched all at once each see the lines the earlier ones
// appended, and only the owner holds the workspace.
func TestCallsRunWhereTheirSessionIsPlaced(t *testing.T) {
	_, _, js := natstest.Run(t)
	// Few calls at a time per node, so that both take some of each session's.
	env := map[string]string{"CORRAL_SANDBOX_CONCURRENCY": "2"}
	a, _ := startNode(t, js, env)
	b, _ := startNode(t, js, env)
	if a.cfg.Node == b.cfg.Node {
		t.Fatalf("both nodes are named %s", a.cfg.Node)
	}
	const sessions, calls = 4, 8
	var ids []uuid.UUID
	for range sessions {
		session := uuid.Must(uuid.NewV7())
		ids = append(ids, session)
		for i := range calls {
			dispatch(t, js, session, uuid.Must(uuid.NewV7()), "Bash", `{"command":"echo x >> lines; wc -l < lines"}`, fmt.Sprintf("%s-%d", session, i))
		}
	}
	for _, session := range ids {
		var counts []int
		for _, r := range resultsOf(t, js, session, calls) {
			n, err := strconv.Atoi(strings.TrimSpace(r.Output))
			if err != nil || r.IsError {
				t.Fatalf("result %+v", r)
			}
			counts = append(counts, n)
		}
		slices.Sort(counts)
		if want := []int{1, 2, 3, 4, 5, 6, 7, 8}; !slices.Equal(counts, want) {
			t.Errorf("session %s: line counts %v, want %v: its calls ran in more than one workspace", session, counts, want)
		}
		owner := placedOn(t, js, session)
		for _, n := range []*Service{a, b} {
			if got, want := hasWorkspace(n, session), n.cfg.Node == owner; got != want {
				t.Errorf("session %s placed on %s: node %s holds its workspace: %v", session, owner, n.cfg.Node, got)
			}
		}
	}
}

// A node that receives a call of a session placed on another live node
// forwards it there and acknowledges it only once the owner recorded the
// result. Once the owner is gone, the next node to receive one of the
// session's calls takes the session over, restores its workspace from the
// snapshot and tells the model.
func TestForwardedThenTakenOver(t *testing.T) {
	_, _, js := natstest.Run(t)
	ctx := context.Background()
	a, stopA := startNode(t, js, nil)
	session := uuid.Must(uuid.NewV7())
	dispatch(t, js, session, uuid.Must(uuid.NewV7()), "Bash", `{"command":"echo one > f"}`, "first")
	resultsOf(t, js, session, 1)
	if owner := placedOn(t, js, session); owner != a.cfg.Node {
		t.Fatalf("placed on %s, want %s", owner, a.cfg.Node)
	}

	// b is not consuming the shared queue: its handler is called as the
	// queue would.
	b := newNode(t, js, nil)
	t.Cleanup(b.driver.Close)
	if err := b.handleCall(ctx, callMsg(t, js, session, "echo two >> f")); err != nil {
		t.Fatalf("forwarded call: %v", err)
	}
	if n := testutil.ToFloat64(b.metrics.forwarded); n != 1 {
		t.Errorf("b counts %v forwarded calls, want 1", n)
	}
	rs := resultsOf(t, js, session, 2)
	if rs[1].IsError {
		t.Fatalf("forwarded call: %+v", rs[1])
	}
	data, err := os.ReadFile(filepath.Join(a.driver.Workspace("acme", session), "f"))
	if err != nil || string(data) != "one\ntwo\n" {
		t.Errorf("f on the owner = %q, %v; want both lines", data, err)
	}
	if hasWorkspace(b, session) {
		t.Error("the forwarding node made a workspace")
	}

	stopA() // a clean stop gives the node's lease up at once
	if err := b.handleCall(ctx, callMsg(t, js, session, "cat f")); err != nil {
		t.Fatalf("call after the owner stopped: %v", err)
	}
	rs = resultsOf(t, js, session, 3)
	if !strings.Contains(rs[2].Output, "moved to another node") || !strings.Contains(rs[2].Output, "one\ntwo\n") {
		t.Errorf("call on the new node = %q; want the note and both lines", rs[2].Output)
	}
	if owner := placedOn(t, js, session); owner != b.cfg.Node {
		t.Errorf("placed on %s after the take-over, want %s", owner, b.cfg.Node)
	}
}

// A session whose last snapshot failed keeps its workspace here, newer
// than any snapshot, when the node places it again at the same placement:
// after a lapse of its lease, or restarted over its data. The next call
// snapshots it. A session another node had meanwhile is restored from its
// snapshot instead.
func TestFailedSnapshotKeepsTheWorkspace(t *testing.T) {
	_, _, js := natstest.Run(t)
	ctx := context.Background()
	dir := t.TempDir()
	env := map[string]string{"CORRAL_DATA_DIR": dir, "CORRAL_SANDBOX_NODE": "n1"}
	a := newNode(t, js, env)
	t.Cleanup(a.driver.Close)
	run := func(svc *Service, session uuid.UUID, command string) string {
		t.Helper()
		m := callMsg(t, js, session, command)
		if err := svc.handleCall(ctx, m); err != nil {
			t.Fatalf("%s: %v", command, err)
		}
		var c event.ToolCall
		_ = json.Unmarshal(m.Data, &c)
		for _, r := range resultsOf(t, js, session, 0) {
			if r.Call == c.Call {
				return r.Output
			}
		}
		t.Fatalf("%s: no result", command)
		return ""
	}
	// One call snapshots; a second's snapshot fails (as when the server
	// goes away under it): its line is only in the workspace here.
	fail := func(svc *Service, session uuid.UUID) {
		t.Helper()
		run(svc, session, "echo one >> f")
		if err := os.WriteFile(filepath.Join(svc.driver.Workspace("acme", session), "f"), []byte("one\ntwo\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		at, err := svc.place.route(ctx, "acme", session)
		if err != nil {
			t.Fatal(err)
		}
		svc.snaps.failed("acme", session, at.rev)
	}

	lapsed := uuid.Must(uuid.NewV7())
	fail(a, lapsed)
	a.place.mu.Lock()
	a.place.lapsed()
	a.place.mu.Unlock()
	if out := run(a, lapsed, "cat f"); out != "one\ntwo\n" {
		t.Errorf("after a lapse: %q, want the workspace kept", out)
	}

	restarted := uuid.Must(uuid.NewV7())
	fail(a, restarted)
	a.driver.Close()
	b := newNode(t, js, env) // the same node, restarted
	t.Cleanup(b.driver.Close)
	if out := run(b, restarted, "cat f"); out != "one\ntwo\n" {
		t.Errorf("after a restart: %q, want the workspace kept", out)
	}
	// Its next call's snapshot holds what the failed one missed.
	run(b, restarted, "true")
	other := newNode(t, js, map[string]string{"CORRAL_SANDBOX_NODE": "n2"})
	t.Cleanup(other.driver.Close)
	w := filepath.Join(t.TempDir(), "w")
	if _, err := other.snaps.restore(ctx, "acme", restarted, w); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(w, "f")); err != nil || string(data) != "one\ntwo\n" {
		t.Errorf("the snapshot after the restart holds f = %q, %v; want both lines", data, err)
	}
	if b.snaps.isDirty("acme", restarted) {
		t.Error("the session is still noted as not snapshotted")
	}

	// Placed on another node in between: its workspace here is stale.
	moved := uuid.Must(uuid.NewV7())
	fail(b, moved)
	kv, err := js.KeyValue(ctx, bus.BucketPlacements)
	if err != nil {
		t.Fatal(err)
	}
	key := bus.PlacementKey("acme", moved)
	for _, node := range []string{"n2", "n1"} {
		if _, err := kv.Put(ctx, key, []byte(node)); err != nil {
			t.Fatal(err)
		}
	}
	b.place.mu.Lock()
	b.place.lapsed()
	b.place.mu.Unlock()
	if out := run(b, moved, "cat f"); !strings.Contains(out, "restored") || !strings.HasSuffix(out, "\none\n") {
		t.Errorf("after another node had it: %q, want the snapshot restored", out)
	}
}

// Loading the configuration writes nothing; the node's name is made when
// the service is, kept in the data directory, and the same after a
// restart over it.
func TestNodeNameIsKeptByTheService(t *testing.T) {
	_, _, js := natstest.Run(t)
	dir := filepath.Join(t.TempDir(), "data")
	env := map[string]string{"CORRAL_DATA_DIR": dir, "CORRAL_CALL_PUBLIC_KEY": event.EncodeKey(callPub)}
	if _, err := LoadConfig(func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("after LoadConfig, the data directory: %v; want none made", err)
	}
	a := newNode(t, js, env)
	a.driver.Close()
	b := newNode(t, js, env)
	b.driver.Close()
	if a.cfg.Node == "" || a.cfg.Node != b.cfg.Node {
		t.Errorf("node names %q and %q, want one name kept over a restart", a.cfg.Node, b.cfg.Node)
	}
}
