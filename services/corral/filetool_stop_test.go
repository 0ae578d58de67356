package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
)

// TestStopEndsAGlobBomb stops a session whose Glob has many ** over a tree
// of about 3,000 entries, a call that once ran on for minutes after the
// stop, holding the session's workspace and a core: the session stops, and
// its workspace is gone, within seconds. (The Glob may be killed or may
// have finished by then: it now takes milliseconds.)
func TestStopEndsAGlobBomb(t *testing.T) {
	// The Bash call waits while the test makes the tree from outside,
	// which is much quicker than making it in the sandbox. Then the model
	// asks for the Glob many times over, so that the stop finds one running
	// however quick each is.
	globs := make([]modeltest.Call, 30)
	for i := range globs {
		globs[i] = modeltest.Call{Name: "Glob", Input: map[string]any{"pattern": "**/**/**/**/**/**/zzz"}}
	}
	p := startDev(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
		switch modeltest.Turns(c) {
		case 0:
			return modeltest.Turn{Calls: []modeltest.Call{bash("while [ ! -e ready ]; do sleep 0.05; done")}}, nil
		case 1:
			return modeltest.Turn{Calls: globs}, nil
		}
		return modeltest.Turn{Text: "done"}, nil
	}, map[string]string{"CORRAL_SANDBOX_SNAPSHOTS": "off"})
	run := p.runBackground(t, "acme", "bomb")
	session := p.startedSession(t)
	ws := filepath.Join(p.data, "workspaces", "acme", session.String())
	natstest.WaitFor(t, 30*time.Second, func() error {
		_, err := os.Stat(ws)
		return err
	})
	for i := range 10 {
		for j := range 10 {
			dir := filepath.Join(ws, fmt.Sprint("a", i), fmt.Sprint("b", j), "c", "d", "e")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for k := range 30 {
				if err := os.WriteFile(filepath.Join(dir, fmt.Sprint("f", k)), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if err := os.WriteFile(filepath.Join(ws, "ready"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		if len(results(p.events(t, session))) == 0 {
			return fmt.Errorf("the Bash call is still waiting")
		}
		return nil
	})
	stopped := time.Now()
	if code, _, stderr := p.corral(t, "stop", "--tenant", "acme", session.String(), "--by", "grace", "--reason", "runaway glob"); code != 0 {
		t.Fatalf("corral stop exited %d: %s", code, stderr)
	}
	r := wait(t, run)
	wantIn(t, "corral run", r.stderr, "stopped by grace: runaway glob")
	natstest.WaitFor(t, 10*time.Second, func() error {
		if _, err := os.Stat(ws); !os.IsNotExist(err) {
			return fmt.Errorf("workspace still there %s after the stop: %v", time.Since(stopped), err)
		}
		return nil
	})
	if took := time.Since(stopped); took > 10*time.Second {
		t.Errorf("the session took %s to stop", took)
	}
	var ran, killed int
	for _, res := range results(p.events(t, session)) {
		switch {
		case res.Name != "Glob":
		case res.Output == "No files found":
			ran++
		case strings.Contains(res.Output, "Killed: the session was stopped"):
			killed++
		case !strings.HasPrefix(res.Output, "Not run: "):
			t.Errorf("Glob result = %q", res.Output)
		}
	}
	t.Logf("%d Globs ran, %d was killed", ran, killed)
	if ran == len(globs) {
		t.Errorf("every Glob ran: the stop came too late to test anything")
	}
}
