package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"corral.dev/pkg/logtest"
	"corral.dev/pkg/memoryapi"
	"corral.dev/pkg/modeltest"
)

// A model's answer reaches a terminal as text alone: the controls in it
// (ESC, and U+009B, which a terminal also takes for the start of an
// escape sequence) are shown as U+FFFD, as its streamed text is. Piped,
// it is written as it is.
func TestRunShowsAnAnswerAsTextOnATerminal(t *testing.T) {
	const answer = "red \x1b[31mtext\x1b[0m, a cleared screen \u009b2J, done"
	p := startDev(t, func(modeltest.Conversation) (modeltest.Turn, error) {
		return modeltest.Turn{Text: answer}, nil
	}, nil)

	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ptmx.Close() })
	var shown bytes.Buffer
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(&shown, ptmx) // until the terminal's other end is closed
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stderr logtest.Buffer
	code := run(ctx, []string{"run", "--nats", p.url, "--tenant", "acme", "--user", "ada", "answer"}, p.getenv, tty, &stderr)
	tty.Close()
	<-copied
	if code != 0 {
		t.Fatalf("corral run exited %d:\n%s", code, stderr.String())
	}
	got := shown.String()
	if strings.ContainsAny(got, "\x1b\u009b") {
		t.Errorf("the terminal was sent the answer's controls: %q", got)
	}
	if want := "red \uFFFD[31mtext\uFFFD[0m, a cleared screen \uFFFD2J, done"; !strings.Contains(got, want) {
		t.Errorf("the terminal shows %q, want it to hold %q", got, want)
	}

	code, stdout, stderrText := p.corral(t, "run", "--tenant", "acme", "--user", "ada", "answer")
	if code != 0 {
		t.Fatalf("corral run exited %d:\n%s", code, stderrText)
	}
	if strings.TrimSpace(stdout) != answer {
		t.Errorf("piped, the answer is %q, want it as it is: %q", stdout, answer)
	}
}

// memories ls and memories log show paths and names as text alone.
func TestMemoryListingsShowTextAlone(t *testing.T) {
	var out bytes.Buffer
	e := &env{stdout: &out}
	e.printFiles([]memoryapi.APIFile{{Path: "/memories/a\u009b2Jb.md", UpdatedBy: "ada\x1b[8m"}})
	if got := out.String(); strings.ContainsAny(got, "\x1b\u009b") || !strings.Contains(got, "/memories/a\uFFFD2Jb.md") || !strings.Contains(got, "ada\uFFFD[8m") {
		t.Errorf("memories ls printed %q", got)
	}
}
