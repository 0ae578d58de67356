package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/modeltest"
)

// compactWindow is the context window the compaction tests give their
// model: small, so that a few large outputs fill it.
const compactWindow = 16000

// stepCommand prints about 8 KB: a build's log, as a model reads it.
func stepCommand(n int) string {
	return fmt.Sprintf("yes 'step %d: a line of the build output, with some words in it' | head -n 150", n)
}

// summaryMarks are what the harness's request for a summary ends with, and
// what a conversation summarised starts with.
const (
	summaryRequestMark = "[Corral] This conversation is about to be compacted"
	summaryMark        = "was compacted to fit the context window"
)

// stepper is a model that runs numbered steps, one Bash call each, the
// next after the last the conversation shows (turns summarised away leave
// the latest), and then answers; asked for a summary, it writes one.
func stepper(last int) modeltest.Script {
	return func(c modeltest.Conversation) (modeltest.Turn, error) {
		if n := len(c.Messages); n > 0 && strings.Contains(c.Messages[n-1].Text, summaryRequestMark) {
			return modeltest.Turn{Text: fmt.Sprintf("Steps 1 to %d are done; each printed its build log.", stepOf(c))}, nil
		}
		next := stepOf(c) + 1
		if next > last {
			return modeltest.Turn{Text: fmt.Sprintf("all %d steps done", last)}, nil
		}
		return modeltest.Turn{Text: fmt.Sprint("step ", next), Calls: []modeltest.Call{bash(stepCommand(next))}}, nil
	}
}

// stepOf returns the last step the conversation shows a call of.
func stepOf(c modeltest.Conversation) int {
	n := 0
	for _, m := range c.Messages {
		for _, call := range m.Calls {
			raw, _ := call.Input.(json.RawMessage)
			var in struct{ Command string }
			_ = json.Unmarshal(raw, &in)
			_, _ = fmt.Sscanf(in.Command, "yes 'step %d:", &n)
		}
	}
	return n
}

// compacted returns what the session's compactions were, and the bytes of
// its tool outputs.
func compacted(evs []any) (compactions []*event.ContextCompacted, summaries, outputs int) {
	for _, ev := range evs {
		switch e := ev.(type) {
		case *event.ContextCompacted:
			compactions = append(compactions, e)
			if e.Summary != "" {
				summaries++
			}
		case *event.ToolCompleted:
			outputs += len(e.Output)
		}
	}
	return compactions, summaries, outputs
}

// A session whose outputs would fill its model's window three times over
// completes: every request fits the window (the fake provider refuses
// those that do not, as the real ones do), and the log holds the
// compactions that made it so, results cleared and turns summarised.
func TestCompactionOverThreeWindows(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bwrap is not on PATH")
	}
	const steps = 40
	p := startDev(t, stepper(steps), map[string]string{
		"CORRAL_MODELS":     writeTemp(t, fmt.Sprintf("%q: {context_window: %d}\n", "openai:gpt-test", compactWindow)),
		"CORRAL_MAX_TOKENS": "1024",
		// Kept few, results cleared make room for many turns; the notes
		// that stand for them add up to summaries at last.
		"CORRAL_COMPACT_KEEP_RESULTS": "1",
	})
	p.model.SetContextWindow(compactWindow)
	code, stdout, stderr := p.corral(t, "run", "--tenant", "acme", "--user", "ada", "run every step")
	if code != 0 {
		t.Fatalf("corral run exited %d:\n%s", code, stderr)
	}
	if want := fmt.Sprintf("all %d steps done", steps); !strings.Contains(stdout, want) {
		t.Errorf("the answer is %q, want %q", stdout, want)
	}
	if !strings.Contains(stderr, "conversation compacted to fit the context window") {
		t.Errorf("corral run showed no compaction:\n%s", stderr)
	}
	compactions, summaries, outputs := compacted(p.events(t, sessionOf(t, stderr)))
	if outputs/4 < 3*compactWindow {
		t.Fatalf("the outputs take %d tokens: not three windows of %d", outputs/4, compactWindow)
	}
	if summaries == 0 || summaries == len(compactions) {
		t.Fatalf("%d compactions, %d with a summary, in the log: want results cleared first, then turns summarised", len(compactions), summaries)
	}
	t.Logf("outputs of %d tokens; %d compactions, %d with a summary", outputs/4, len(compactions), summaries)
	for _, c := range compactions {
		if c.TokensAfter >= c.TokensBefore {
			t.Errorf("a compaction at turn %d took the estimate from %d to %d tokens", c.Turn, c.TokensBefore, c.TokensAfter)
		}
	}
}

// A harness killed (SIGKILL) right after it recorded a compaction, as it
// asks the model with the compacted conversation, is replaced by one that
// rebuilds the session from its log and asks with the very same bytes;
// the compaction is not made again, and the session completes.
func TestCompactionSurvivesSIGKILL(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bwrap is not on PATH")
	}
	const steps = 12
	bin := filepath.Join(t.TempDir(), "harness")
	if out, err := exec.Command("go", "build", "-o", bin, "corral.dev/services/harness/cmd/harness").CombinedOutput(); err != nil {
		t.Fatalf("build harness: %v\n%s", err, out)
	}
	// The first request made with a summary blocks until its harness is
	// killed; every request for that turn is kept.
	var (
		mu      sync.Mutex
		target  int
		bodies  [][]byte
		once    sync.Once
		waiting = make(chan struct{}, 1)
		release = make(chan struct{})
	)
	next := stepper(steps)
	_, js, benchEnv := benchPlatform(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
		if n := len(c.Messages); n > 0 && !strings.Contains(c.Messages[n-1].Text, summaryRequestMark) {
			mu.Lock()
			if target == 0 && strings.Contains(c.Messages[0].Text, summaryMark) {
				target = stepOf(c)
			}
			mine := target != 0 && stepOf(c) == target
			if mine {
				bodies = append(bodies, bytes.Clone(c.Body))
			}
			mu.Unlock()
			if mine {
				once.Do(func() {
					waiting <- struct{}{}
					<-release
				})
			}
		}
		return next(c)
	})
	models := writeTemp(t, fmt.Sprintf("%q: {context_window: %d}\n", "openai:bench", compactWindow))
	getenv := func(k string) string {
		switch k {
		case "CORRAL_MODELS":
			return models
		case "CORRAL_MAX_TOKENS":
			return "1024"
		}
		return benchEnv(k)
	}
	runServices(t, js, getenv, false)
	start, logFile := harnessProcess(t, bin, getenv, "CORRAL_MODELS", "CORRAL_MAX_TOKENS")
	harness := start()
	defer func() { _ = harness.Process.Kill(); _ = harness.Wait() }()

	session := uuid.Must(uuid.NewV7())
	req := event.Request{Header: event.NewHeader(event.TypeRequest, "acme", session), User: "ada", Prompt: "run every step"}
	if err := bus.Publish(context.Background(), js, bus.RequestSubject("acme", session, req.User), req.ID.String(), &req); err != nil {
		t.Fatal(err)
	}
	select {
	case <-waiting:
	case <-time.After(90 * time.Second):
		b, _ := os.ReadFile(logFile)
		t.Fatalf("no request made with a summary:\n%s", b)
	}
	_ = harness.Process.Kill()
	_ = harness.Wait()
	harness = start()
	close(release)

	evs := completedLog(t, js, "acme", session, 90*time.Second)
	mu.Lock()
	defer mu.Unlock()
	if len(bodies) != 2 {
		t.Fatalf("the model was asked %d times for step %d, want twice: before the kill and after", len(bodies), target+1)
	}
	if !bytes.Equal(bodies[0], bodies[1]) {
		t.Errorf("the rebuilt session asked with other bytes than the killed one:\nbefore %d bytes\n%.2000s\nafter %d bytes\n%.2000s", len(bodies[0]), bodies[0], len(bodies[1]), bodies[1])
	}
	turns := map[int]int{}
	for _, e := range evs {
		if c, ok := e.Event.(*event.ContextCompacted); ok {
			turns[c.Turn]++
			if turns[c.Turn] > 1 {
				t.Errorf("two compactions before turn %d", c.Turn+1)
			}
		}
	}
	if len(turns) == 0 {
		t.Error("no compaction in the log")
	}
	t.Logf("killed as it asked for step %d; %d compactions before turns %v", target+1, len(turns), turns)
}
