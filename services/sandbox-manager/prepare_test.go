package sandboxmanager

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/sessionlog"
	"corral.dev/pkg/upload"
)

// A workspace is prepared once: a redelivered preparation whose result is
// recorded does nothing, and one whose node recorded nothing after it had
// laid the workspace out and kept its base (it died) restores that base
// rather than lay the files out again.
func TestPrepareIsNotRepeated(t *testing.T) {
	js, cfg := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte("package main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ref, _, err := upload.Upload(ctx, js, "acme", "ada", src)
	if err != nil {
		t.Fatal(err)
	}
	// requested records a session's first request, to start from the
	// upload, and returns the call that prepares it, signed.
	requested := func(session uuid.UUID) event.ToolCall {
		prepare := uuid.NewSHA1(session, []byte("prepare"))
		record(t, js, sessionlog.Harness, &event.SessionRequested{Header: event.NewHeader(event.TypeSessionRequested, "acme", session),
			Request: uuid.New(), User: "ada", Model: "openai:gpt-test", Prompt: "hi", Files: ref, Prepare: prepare})
		record(t, js, sessionlog.Harness, &event.ToolDispatched{Header: event.NewHeader(event.TypeToolDispatched, "acme", session),
			Call: prepare, Name: event.PrepareTool, Service: bus.ServiceSandbox})
		input, _ := json.Marshal(event.PrepareInput{Files: ref})
		return signed(event.ToolCall{Header: event.NewHeader(event.TypeToolCall, "acme", session), Call: prepare, User: "ada", Name: event.PrepareTool, Input: input})
	}
	queue := func(c event.ToolCall, msgID string) {
		t.Helper()
		if err := bus.Publish(ctx, js, bus.ToolSubject(bus.ServiceSandbox, "acme", c.Session), msgID, &c); err != nil {
			t.Fatal(err)
		}
	}

	session := uuid.Must(uuid.NewV7())
	c := requested(session)
	queue(c, "first")
	r := resultsOf(t, js, session, 1)[0]
	if r.IsError || r.Prepared == nil || r.Prepared.Files != 1 {
		t.Fatalf("prepared: %+v", r)
	}
	// What the session did since stays: a redelivery prepares nothing.
	marker := filepath.Join(cfg.DataDir, "workspaces", "acme", session.String(), "since")
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	queue(c, "again")
	dispatch(t, js, session, uuid.Must(uuid.NewV7()), "Bash", `{"command":"true"}`, "after")
	if rs := resultsOf(t, js, session, 2); len(rs) != 2 {
		t.Errorf("%d results, want the preparation's once and the call's", len(rs))
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the redelivered preparation laid the workspace out again: %v", err)
	}

	// A node that died after keeping the base: the upload is gone since,
	// so only the base can give the workspace back.
	died := uuid.Must(uuid.NewV7())
	c = requested(died)
	other := newNode(t, js, nil)
	t.Cleanup(other.driver.Close)
	if _, err := other.prepare(ctx, &c, event.PrepareInput{Files: ref}, &event.ToolCompleted{}); err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, bus.StreamUploads)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	queue(c, "redelivered")
	r = resultsOf(t, js, died, 1)[0]
	if r.IsError || r.Prepared == nil || r.Prepared.Files != 1 {
		t.Fatalf("prepared again: %+v", r)
	}
	if b, err := os.ReadFile(filepath.Join(cfg.DataDir, "workspaces", "acme", died.String(), "main.go")); err != nil || string(b) != "package main\n" {
		t.Errorf("main.go after the redelivery: %q, %v", b, err)
	}
}
