package sandboxmanager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/sessionlog"
	"corral.dev/pkg/snapshot"
)

// A sandbox-manager starting over a data directory its predecessor left
// removes the workspaces no session needs any more, and keeps the rest.
func TestReaperCleansUpWhatAPredecessorLeft(t *testing.T) {
	_, _, js := natstest.Run(t)
	ctx := context.Background()
	data := t.TempDir()
	workspace := func(session uuid.UUID) string {
		return filepath.Join(data, "workspaces", "acme", session.String())
	}
	requested := func(session uuid.UUID) {
		record(t, js, sessionlog.Harness, &event.SessionRequested{Header: event.NewHeader(event.TypeSessionRequested, "acme", session), Request: uuid.New(), User: "ada", Model: "openai:gpt-test", Prompt: "p"})
	}
	sessions := map[string]uuid.UUID{}
	for _, name := range []string{"unknown", "stopped", "failed", "moved", "idle", "live", "forged"} {
		session := uuid.Must(uuid.NewV7())
		sessions[name] = session
		if err := os.MkdirAll(workspace(session), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(workspace(session), "f"), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
		if name != "unknown" {
			requested(session)
		}
	}
	record(t, js, sessionlog.Harness, &event.SessionStopped{Header: event.NewHeader(event.TypeSessionStopped, "acme", sessions["stopped"]), By: "ada"})
	record(t, js, sessionlog.Harness, &event.SessionFailed{Header: event.NewHeader(event.TypeSessionFailed, "acme", sessions["failed"]), Code: event.CodeModelError, Reason: "boom"})
	// A later event of another kind does not hide the stop.
	call := uuid.Must(uuid.NewV7())
	responded(t, js, "acme", sessions["stopped"], call, "Bash")
	record(t, js, sessionlog.Sandbox, &event.ToolCompleted{Header: event.NewHeader(event.TypeToolCompleted, "acme", sessions["stopped"]), Call: call, Name: "Bash", Output: "Killed", Service: bus.ServiceSandbox})
	// A stop the harness did not write (the sandbox-manager's own
	// credentials may publish on the sandbox's token) ends nothing.
	record(t, js, sessionlog.Sandbox, &event.SessionStopped{Header: event.NewHeader(event.TypeSessionStopped, "acme", sessions["forged"]), By: "ada"})
	places, err := js.KeyValue(ctx, bus.BucketPlacements)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := places.Put(ctx, bus.PlacementKey("acme", sessions["moved"]), []byte("another-node")); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(workspace(sessions["idle"]), old, old); err != nil {
		t.Fatal(err)
	}
	// The unknown session's snapshot goes with it.
	store, err := js.ObjectStore(ctx, bus.BucketWorkspaces)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.PutBytes(ctx, snapshot.ManifestName("acme", sessions["unknown"]), []byte(`{"seq":1}`)); err != nil {
		t.Fatal(err)
	}

	svc, _ := startNode(t, js, map[string]string{"CORRAL_DATA_DIR": data, "CORRAL_SANDBOX_WORKSPACE_TTL": "1h"})
	natstest.WaitFor(t, 10*time.Second, func() error {
		for name, session := range sessions {
			_, err := os.Stat(workspace(session))
			if kept := err == nil; kept != (name == "live" || name == "forged") {
				return fmt.Errorf("workspace of the %s session kept: %v", name, kept)
			}
		}
		return nil
	})
	if _, err := store.GetInfo(ctx, snapshot.ManifestName("acme", sessions["unknown"])); !errors.Is(err, jetstream.ErrObjectNotFound) {
		t.Errorf("the unknown session's snapshot: %v, want it gone", err)
	}
	// Ended sessions of the last hour are also destroyed as their stops
	// are read back (stop.go), so only the others are counted here. A
	// reap is counted once its workspace, snapshot and placement are
	// gone: wait for the count as for the workspaces.
	natstest.WaitFor(t, 10*time.Second, func() error {
		for why, want := range map[string]float64{"no_session": 1, "moved": 1, "idle": 1} {
			if got := counterValue(t, svc, why); got != want {
				return fmt.Errorf("reaped %s = %v, want %v", why, got, want)
			}
		}
		return nil
	})
	// The session that lives on runs where it was, with its file.
	dispatch(t, js, sessions["live"], uuid.Must(uuid.NewV7()), "Bash", `{"command":"cat f"}`, "live")
	if r := resultsOf(t, js, sessions["live"], 1)[0]; strings.TrimSpace(r.Output) != "live" {
		t.Errorf("the live session's call: %+v", r)
	}
}

// counterValue reads how many workspaces svc reaped for why.
func counterValue(t *testing.T, svc *Service, why string) float64 {
	t.Helper()
	return testutil.ToFloat64(svc.metrics.reaped.WithLabelValues(why))
}
