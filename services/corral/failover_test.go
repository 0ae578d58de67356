package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/sessionlog"
)

// A harness killed (SIGKILL) mid-session hands the session over, within
// its short lease, to the harness started in its place, and no call runs
// twice: killed once while it waits for the model, and once just as it
// dispatches a call. Each call appends its number to a file; the last one
// reads it back.
func TestHarnessKilledRunsNoCallTwice(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bwrap is not on PATH")
	}
	bin := filepath.Join(t.TempDir(), "harness")
	if out, err := exec.Command("go", "build", "-o", bin, "corral.dev/services/harness/cmd/harness").CombinedOutput(); err != nil {
		t.Fatalf("build harness: %v\n%s", err, out)
	}
	bash := func(cmd string) modeltest.Turn {
		return modeltest.Turn{Calls: []modeltest.Call{{Name: "Bash", Input: map[string]any{"command": cmd}}}}
	}
	// The second turn's first request blocks until its harness is killed.
	waiting, release := make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	srv, js, getenv := benchPlatform(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
		switch modeltest.Turns(c) {
		case 0:
			return bash("echo 0 >> calls"), nil
		case 1:
			first := false
			once.Do(func() { first = true })
			if first {
				waiting <- struct{}{}
				<-release
			}
			return bash("echo 1 >> calls"), nil
		case 2:
			return bash("echo 2 >> calls"), nil
		case 3:
			return bash("cat calls"), nil
		}
		return modeltest.Turn{Text: "done"}, nil
	})
	runServices(t, js, getenv, false)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	calls, err := nc.SubscribeSync("tools.>")
	if err != nil {
		t.Fatal(err)
	}

	start, logFile := harnessProcess(t, bin, getenv)
	harness := start()
	defer func() { _ = harness.Process.Kill(); _ = harness.Wait() }()
	kill := func() {
		_ = harness.Process.Kill()
		_ = harness.Wait()
		harness = start()
	}
	next := func() *nats.Msg {
		t.Helper()
		m, err := calls.NextMsg(30 * time.Second)
		if err != nil {
			b, _ := os.ReadFile(logFile)
			t.Fatalf("no tool call: %v\n%s", err, b)
		}
		return m
	}

	session := uuid.Must(uuid.NewV7())
	req := event.Request{Header: event.NewHeader(event.TypeRequest, "acme", session), User: "ada", Prompt: "count"}
	if err := bus.Publish(context.Background(), js, bus.RequestSubject("acme", session, req.User), req.ID.String(), &req); err != nil {
		t.Fatal(err)
	}
	next() // echo 0
	<-waiting
	kill() // waiting for the model
	close(release)
	next() // echo 1
	kill() // just as it dispatched the call
	next() // echo 2

	evs := completedLog(t, js, "acme", session, 60*time.Second)
	var results []*event.ToolCompleted
	ran := map[uuid.UUID]int{}
	for _, e := range evs {
		if r, ok := e.Event.(*event.ToolCompleted); ok {
			results = append(results, r)
			ran[r.Call]++
		}
	}
	if len(results) != 4 || len(ran) != 4 {
		t.Fatalf("%d results of %d calls, want 4 of 4", len(results), len(ran))
	}
	if got, want := strings.TrimSpace(results[3].Output), "0\n1\n2"; got != want {
		t.Errorf("the calls appended\n%s\nwant\n%s", got, want)
	}
}

// completedLog waits until the session of tenant has completed, and
// returns its log; it fails the test if the session failed.
func completedLog(t *testing.T, js jetstream.JetStream, tenant string, session uuid.UUID, within time.Duration) []sessionlog.Entry {
	t.Helper()
	var evs []sessionlog.Entry
	natstest.WaitFor(t, within, func() error {
		var err error
		evs, _, err = sessionlog.New(js, sessionlog.Options{Reader: "test"}).ReadAll(context.Background(), tenant, session)
		if err != nil {
			return err
		}
		for _, e := range evs {
			switch e.Event.(type) {
			case *event.SessionCompleted:
				return nil
			case *event.SessionFailed:
				t.Fatalf("session failed: %+v", e.Event)
			}
		}
		return fmt.Errorf("session not completed")
	})
	return evs
}
