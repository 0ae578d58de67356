package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/logtest"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
)

// watched is a client command running in the background, whose output a
// test reads as it is written.
type watched struct {
	stdout, stderr logtest.Buffer
	code           chan int
}

// start runs a client command against the platform in the background.
func (p *platform) start(t *testing.T, args ...string) *watched {
	t.Helper()
	w := &watched{code: make(chan int, 1)}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	args = append(args[:1:1], append([]string{"--nats", p.url}, args[1:]...)...)
	go func() { w.code <- run(ctx, args, p.getenv, &w.stdout, &w.stderr) }()
	return w
}

// wait waits for the command to end, and fails the test unless it ended
// with status 0.
func (w *watched) wait(t *testing.T) {
	t.Helper()
	select {
	case code := <-w.code:
		if code != 0 {
			t.Fatalf("exit %d:\n%s%s", code, w.stdout.String(), w.stderr.String())
		}
	case <-time.After(70 * time.Second):
		t.Fatalf("the command did not end:\n%s", w.stderr.String())
	}
}

// waitFor waits until out holds want, and returns the session's log then.
func (p *platform) waitFor(t *testing.T, what string, out *logtest.Buffer, want string, session func() uuid.UUID) []any {
	t.Helper()
	var evs []any
	natstest.WaitFor(t, 30*time.Second, func() error {
		if !strings.Contains(out.String(), want) {
			return fmt.Errorf("%s lacks %q:\n%s", what, want, out.String())
		}
		evs = p.events(t, session())
		return nil
	})
	return evs
}

// heldTurn is a model whose answer streams its first piece, then waits
// until release is closed.
func heldTurn(answer string) (modeltest.Script, func()) {
	hold := make(chan struct{})
	var once sync.Once
	return func(c modeltest.Conversation) (modeltest.Turn, error) {
		return modeltest.Turn{Text: answer, Hold: hold}, nil
	}, func() { once.Do(func() { close(hold) }) }
}

// `corral run` shows the model's text as it streams: its first piece is on
// run's output while the model still holds the rest, before the turn's
// response is recorded; then the rest, once, and the answer on stdout.
func TestRunShowsTextAsItStreams(t *testing.T) {
	const answer = "The answer streams in pieces, long before the turn ends."
	script, release := heldTurn(answer)
	p := startDev(t, script, nil)
	defer release()
	run := p.start(t, "run", "--tenant", "acme", "--user", "ada", "stream it")
	first := modelPrefix + answer[:16]
	evs := p.waitFor(t, "run's stderr", &run.stderr, first, func() uuid.UUID { return sessionOf(t, run.stderr.String()) })
	for _, ev := range evs {
		if _, ok := ev.(*event.ModelResponded); ok {
			t.Fatalf("the turn's response is recorded before its text was shown")
		}
	}
	if got := run.stderr.String(); strings.Contains(got, answer) {
		t.Fatalf("the whole text is shown while the model holds it:\n%s", got)
	}
	release()
	run.wait(t)
	if got := strings.TrimSpace(run.stdout.String()); got != answer {
		t.Errorf("stdout %q, want the answer %q", got, answer)
	}
	if got := run.stderr.String(); strings.Count(got, answer[:16]) != 1 || !strings.Contains(got, modelPrefix+answer+"\n") {
		t.Errorf("stderr shows the text other than once, whole:\n%s", got)
	}
}

// A stream cut mid-answer is asked again: run says the text shown is void,
// shows the new attempt's, and the answer is whole.
func TestRunMarksAnAnswerAskedAgain(t *testing.T) {
	const answer = "An answer cut after its first piece, then asked again."
	p := startDev(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
		return modeltest.Turn{Text: answer}, nil
	}, nil)
	p.model.CutNext(1)
	code, stdout, stderr := p.corral(t, "run", "--tenant", "acme", "--user", "ada", "cut it")
	if code != 0 {
		t.Fatalf("corral run exited %d:\n%s", code, stderr)
	}
	if got := strings.TrimSpace(stdout); got != answer {
		t.Errorf("stdout %q, want the answer %q", got, answer)
	}
	want := modelPrefix + answer[:16] + "\n" + restartLine + "\n" + modelPrefix + answer + "\n"
	if !strings.Contains(stderr, want) {
		t.Errorf("stderr lacks the cut text, the mark and the text asked again:\n%s\nwant it to hold:\n%s", stderr, want)
	}
}

// `corral run` shows a running Bash call's output line by line as it is
// written: its first line before the call ends.
func TestRunShowsOutputAsItComes(t *testing.T) {
	p := startDev(t, steps(func(results []string) string { return "done: " + strings.Join(results, "") },
		bash("echo first; sleep 3; echo second")), nil)
	run := p.start(t, "run", "--tenant", "acme", "--user", "ada", "run it")
	evs := p.waitFor(t, "run's stderr", &run.stderr, outputPrefix+"first\n", func() uuid.UUID { return sessionOf(t, run.stderr.String()) })
	if rs := results(evs); len(rs) != 0 {
		t.Fatalf("the call's result %q is recorded before its first line was shown", rs[0].Output)
	}
	if got := run.stderr.String(); strings.Contains(got, outputPrefix+"second") {
		t.Fatalf("the second line is shown before it was written:\n%s", got)
	}
	run.wait(t)
	got := run.stderr.String()
	want := regexp.MustCompile(`second"}\n` + regexp.QuoteMeta(outputPrefix) + `first\n` + regexp.QuoteMeta(outputPrefix) + `second\n← Bash \[[0-9a-f]{6}\] first second\n`)
	if !want.MatchString(got) {
		t.Errorf("stderr:\n%s\nwant it to match:\n%s", got, want)
	}
	wantIn(t, "stdout", run.stdout.String(), "done: first\nsecond\n")
}

// `corral logs -f` of a running session shows its output as it comes too.
func TestLogsFollowShowsOutputAsItComes(t *testing.T) {
	p := startDev(t, steps(func([]string) string { return "done" }, bash("sleep 1; echo first; sleep 3; echo second")), nil)
	run := p.start(t, "run", "--tenant", "acme", "--user", "ada", "run it")
	var session uuid.UUID
	natstest.WaitFor(t, 30*time.Second, func() error {
		if !strings.Contains(run.stderr.String(), "→ Bash") {
			return fmt.Errorf("no call dispatched yet:\n%s", run.stderr.String())
		}
		session = sessionOf(t, run.stderr.String())
		return nil
	})
	logs := p.start(t, "logs", "--tenant", "acme", "-f", session.String())
	evs := p.waitFor(t, "logs' stdout", &logs.stdout, outputPrefix+"first\n", func() uuid.UUID { return session })
	if rs := results(evs); len(rs) != 0 {
		t.Fatalf("the call's result %q is recorded before its first line was shown", rs[0].Output)
	}
	logs.wait(t)
	run.wait(t)
	got := logs.stdout.String()
	wantIn(t, "logs' stdout", got, outputPrefix+"first\n"+outputPrefix+"second\n", "session.completed")
	if strings.Index(got, outputPrefix+"second") > strings.Index(got, "tool.completed") {
		t.Errorf("the call's output is shown after its result:\n%s", got)
	}
}

// `corral run` says why a turn stopped when that is news: a refusal, with
// the model's words, and `corral logs` records it.
func TestRunShowsARefusal(t *testing.T) {
	p := startDev(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
		return modeltest.Turn{Refusal: "I won't help with that."}, nil
	}, nil)
	code, _, stderr := p.corral(t, "run", "--tenant", "acme", "--user", "ada", "something bad")
	if code != 0 {
		t.Fatalf("corral run exited %d:\n%s", code, stderr)
	}
	if !strings.Contains(stderr, "· the model refused: I won't help with that.") {
		t.Errorf("stderr does not show the refusal:\n%s", stderr)
	}
}

// `corral run` shows the model's text after the session's request, even
// when its first piece comes before the log's first event does: the log's
// consumer is made only once the request is sent, and a fast harness may
// have the model streaming by then. Here the piece is sent the moment the
// request reaches the server.
func TestRunShowsTheRequestBeforeTheText(t *testing.T) {
	p := startDev(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
		if modeltest.Turns(c) > 1 {
			return modeltest.Turn{Text: "done"}, nil
		}
		return modeltest.Turn{Calls: []modeltest.Call{{Name: "Bash", Input: map[string]any{"command": "true"}}}}, nil
	}, nil)
	nc, err := p.connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sub, err := nc.Subscribe("requests.acme.>", func(m *nats.Msg) {
		_, session, err := bus.ParseSubject(m.Subject)
		if err != nil {
			t.Error(err)
			return
		}
		piece, _ := json.Marshal(event.Live{Kind: event.LiveText, Turn: 1, Seq: 1, Text: "early piece"})
		if err := nc.Publish(bus.LiveSubject("acme", session), piece); err != nil {
			t.Error(err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	run := p.start(t, "run", "--tenant", "acme", "--user", "ada", "go")
	p.waitFor(t, "run's stderr", &run.stderr, modelPrefix+"early piece", func() uuid.UUID { return sessionOf(t, run.stderr.String()) })
	run.wait(t)
	out := run.stderr.String()
	request, text := strings.Index(out, "· request from"), strings.Index(out, modelPrefix+"early piece")
	if request < 0 || request > text {
		t.Errorf("the model's text is shown before the session's request:\n%s", out)
	}
}
