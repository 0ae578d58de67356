package sandboxmanager

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
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

// start runs a sandbox-manager against a fresh embedded server.
func start(t *testing.T) (jetstream.JetStream, Config) {
	t.Helper()
	_, _, js := natstest.Run(t)
	svc, _ := startNode(t, js, nil)
	return js, svc.cfg
}

// startNode runs a sandbox-manager on js with a data directory of its
// own and the settings in env, until the returned func or the test's end
// stops it.
func startNode(t *testing.T, js jetstream.JetStream, env map[string]string) (*Service, func()) {
	t.Helper()
	svc := newNode(t, js, env)
	return svc, natstest.Serve(t, svc.Run)
}

// callPub and callKey are the harness's key pair for calls in these
// tests: the nodes verify every call with callPub.
var callPub, callKey, _ = ed25519.GenerateKey(nil)

// signed returns c signed as the harness signs a call for the sandbox.
func signed(c event.ToolCall) event.ToolCall {
	c.Sign(callKey, bus.ServiceSandbox)
	return c
}

// newNode returns a sandbox-manager on js with a data directory of its
// own and the settings in env, not yet running.
func newNode(t *testing.T, js jetstream.JetStream, env map[string]string) *Service {
	t.Helper()
	dir := t.TempDir()
	cfg, err := LoadConfig(func(k string) string {
		switch {
		case k == "CORRAL_DATA_DIR" && env[k] == "":
			return dir
		case k == "CORRAL_CALL_PUBLIC_KEY":
			return event.EncodeKey(callPub)
		}
		return env[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := New(context.Background(), cfg, js, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// record writes ev to its session's log as writer w.
func record(t *testing.T, js jetstream.JetStream, w sessionlog.Writer, ev event.Event) {
	t.Helper()
	h := ev.Head()
	err := sessionlog.New(js, sessionlog.Options{As: w, Reader: "test"}).Record(context.Background(), ev, h.ID.String())
	if err != nil {
		t.Fatal(err)
	}
}

// responded records, as the harness does before it dispatches a call, a
// response of the model holding call, dispatched to the sandbox: a result
// is believed only for a call so dispatched. A call dispatched again has
// its response recorded once.
func responded(t *testing.T, js jetstream.JetStream, tenant string, session, call uuid.UUID, name string) {
	t.Helper()
	r := event.ModelResponded{Header: event.NewHeader(event.TypeModelResponded, tenant, session), Turn: 1, Model: "openai:gpt-test", StopReason: "tool_use",
		Calls: []event.Call{{ID: call, ToolUseID: "t-" + call.String(), Name: name, Service: bus.ServiceSandbox}}}
	err := sessionlog.New(js, sessionlog.Options{As: sessionlog.Harness, Reader: "test"}).Record(context.Background(), &r, call.String()+":response")
	if err != nil && !errors.Is(err, sessionlog.ErrDuplicate) {
		t.Fatal(err)
	}
}

// dispatch puts a call of tenant acme on the queue under msgID, as a
// harness would.
func dispatch(t *testing.T, js jetstream.JetStream, session uuid.UUID, call uuid.UUID, name, input, msgID string) {
	t.Helper()
	dispatchIn(t, js, "acme", session, call, name, input, msgID)
}

// dispatchIn is dispatch for a session of tenant.
func dispatchIn(t *testing.T, js jetstream.JetStream, tenant string, session uuid.UUID, call uuid.UUID, name, input, msgID string) {
	t.Helper()
	responded(t, js, tenant, session, call, name)
	c := signed(event.ToolCall{Header: event.NewHeader(event.TypeToolCall, tenant, session), Call: call, Turn: 1, User: "ada", Name: name, Input: json.RawMessage(input)})
	if err := bus.Publish(context.Background(), js, bus.ToolSubject(bus.ServiceSandbox, tenant, session), msgID, &c); err != nil {
		t.Fatal(err)
	}
}

// resultsOf waits until n results are recorded for a session of tenant
// acme, and returns them.
func resultsOf(t *testing.T, js jetstream.JetStream, session uuid.UUID, n int) []event.ToolCompleted {
	t.Helper()
	return resultsIn(t, js, "acme", session, n)
}

// resultsIn waits until n results the session log accepts are recorded
// for a session of tenant, and returns them.
func resultsIn(t *testing.T, js jetstream.JetStream, tenant string, session uuid.UUID, n int) []event.ToolCompleted {
	t.Helper()
	var out []event.ToolCompleted
	natstest.WaitFor(t, 15*time.Second, func() error {
		out = results(t, js, tenant, session)
		if len(out) < n {
			return fmt.Errorf("%d results, want %d", len(out), n)
		}
		return nil
	})
	return out
}

// results returns the results the session log accepts of a session of
// tenant.
func results(t *testing.T, js jetstream.JetStream, tenant string, session uuid.UUID) []event.ToolCompleted {
	t.Helper()
	entries, _, err := sessionlog.New(js, sessionlog.Options{Reader: "test"}).ReadAll(context.Background(), tenant, session)
	if err != nil {
		t.Fatal(err)
	}
	var out []event.ToolCompleted
	for _, e := range entries {
		if r, ok := e.Event.(*event.ToolCompleted); ok {
			out = append(out, *r)
		}
	}
	return out
}

// A call delivered again after its result is recorded (a re-publish after
// the duplicate window, or a redelivery after the ack was lost) does not run
// again.
func TestCallWithRecordedResultIsNotRunAgain(t *testing.T) {
	js, cfg := start(t)
	session, call := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	dispatch(t, js, session, call, "Bash", `{"command":"echo ran >> effects"}`, "first")
	resultsOf(t, js, session, 1)
	dispatch(t, js, session, call, "Bash", `{"command":"echo ran >> effects"}`, "second")
	// A later call of the same session runs after it, so once its result is
	// in, the repeated call has been handled.
	dispatch(t, js, session, uuid.Must(uuid.NewV7()), "Bash", `{"command":"true"}`, "third")
	rs := resultsOf(t, js, session, 2)
	if len(rs) != 2 {
		t.Errorf("%d results recorded, want 2", len(rs))
	}
	data, err := os.ReadFile(filepath.Join(cfg.DataDir, "workspaces", "acme", session.String(), "effects"))
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != "ran\n" {
		t.Errorf("effects = %q, want the command run once", data)
	}
}

// A call marked as started but without a result was interrupted: a Bash or
// Edit call is reported as such, a repeatable call runs again.
func TestInterruptedCalls(t *testing.T) {
	js, cfg := start(t)
	kv, err := js.KeyValue(context.Background(), bus.BucketCalls)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, tool, input string
		interrupted       bool
	}{
		{"bash", "Bash", `{"command":"echo ran >> effects"}`, true},
		{"edit", "Edit", `{"file_path":"/workspace/f","old_string":"a","new_string":"b"}`, true},
		{"write", "Write", `{"file_path":"/workspace/f","content":"a"}`, false},
		{"read", "Read", `{"file_path":"/workspace/f"}`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			session, call := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
			if err := os.MkdirAll(filepath.Join(cfg.DataDir, "workspaces", "acme", session.String()), 0o755); err != nil {
				t.Fatal(err)
			}
			// The mark a sandbox-manager that died mid-call left behind.
			if _, err := kv.Create(context.Background(), bus.CallKey("acme", session, call), []byte("dead-manager")); err != nil {
				t.Fatal(err)
			}
			dispatch(t, js, session, call, tc.tool, tc.input, call.String())
			r := resultsOf(t, js, session, 1)[0]
			gotInterrupted := strings.HasPrefix(r.Output, "The call was interrupted")
			if gotInterrupted != tc.interrupted || (gotInterrupted && !r.IsError) {
				t.Errorf("result = %+v; want interrupted=%v", r, tc.interrupted)
			}
			if _, err := os.Stat(filepath.Join(cfg.DataDir, "workspaces", "acme", session.String(), "effects")); err == nil {
				t.Error("the interrupted Bash call ran again")
			}
		})
	}
}

// A call that may change its workspace but does not run (here, its
// arguments do not parse) leaves the workspace up to date with its
// snapshot, here and in the note on disk that a restarted node reads: it
// is not kept as the only up-to-date copy.
func TestCallNotRunLeavesItsWorkspaceUpToDate(t *testing.T) {
	_, _, js := natstest.Run(t)
	svc, _ := startNode(t, js, nil)
	session := uuid.Must(uuid.NewV7())
	dispatch(t, js, session, uuid.Must(uuid.NewV7()), "Bash", `{"command":"echo hi > kept"}`, "c1")
	resultsOf(t, js, session, 1)
	dispatch(t, js, session, uuid.Must(uuid.NewV7()), "Bash", `{"commmand":"echo typo"}`, "c2")
	if res := resultsOf(t, js, session, 2)[1]; !res.IsError || !strings.Contains(res.Output, "Error:") {
		t.Fatalf("call with bad arguments: %+v, want an error", res)
	}
	natstest.WaitFor(t, 5*time.Second, func() error {
		if rev, ahead := svc.snaps.failedAt("acme", session); ahead {
			return fmt.Errorf("failedAt = %d, true; want the workspace up to date", rev)
		}
		again, err := newSnapshots(context.Background(), js, svc.snaps.dir, t.TempDir(), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if rev, ahead := again.failedAt("acme", session); ahead {
			return fmt.Errorf("on disk: failedAt = %d, true; want the workspace up to date", rev)
		}
		return nil
	})
}
