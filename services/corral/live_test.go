package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/natstest"
)

// hearing has v take l as the live subject would bring it.
func hearing(t *testing.T, v *liveView, l event.Live) {
	t.Helper()
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.take(&nats.Msg{Data: b})
}

func TestLiveView(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	v := newLiveView(&out)
	text := func(turn, attempt, seq int, s string) event.Live {
		return event.Live{Kind: event.LiveText, Turn: turn, Attempt: attempt, Seq: seq, Text: s}
	}
	call, other := uuid.New(), uuid.New()
	output := func(call uuid.UUID, s string) event.Live {
		return event.Live{Kind: event.LiveOutput, Call: call, Name: "Bash", Text: s}
	}

	v.line("session S")
	hearing(t, v, text(1, 1, 1, "Let me "))
	hearing(t, v, text(1, 1, 2, "look"))
	// Cut, and asked again: what was shown is void.
	hearing(t, v, text(1, 2, 1, "I will list "))
	hearing(t, v, text(1, 2, 2, "the \x1b[31mfiles\r."))
	// Output of a call not shown dispatched yet waits for its dispatch.
	hearing(t, v, output(call, "early\n"))
	shown := v.responded(1)
	v.rest(shown, "I will list the \x1b[31mfiles\r. Then read them.")
	v.line("→ Bash ls")
	v.callDispatched(call)
	hearing(t, v, output(call, "a.txt\nb"))
	hearing(t, v, output(call, ".txt\n\x1b]0;title\x07"))
	hearing(t, v, output(other, "not dispatched\n"))
	v.callCompleted(call, "a.txt\nb.txt\n\x1b]0;title\x07")
	hearing(t, v, output(call, "after its result\n"))
	v.line("← a.txt b.txt")
	// A late piece of a recorded turn is dropped; the next turn's shows.
	hearing(t, v, text(1, 2, 3, " late"))
	hearing(t, v, text(2, 1, 1, "Done."))
	if got := v.responded(2); got != "Done." {
		t.Errorf("responded(2) = %q, want the text shown", got)
	}
	v.rest("Done.", "Done.")

	want := "session S\n" +
		"· model: Let me look\n" +
		restartLine + "\n" +
		"· model: I will list the \uFFFD[31mfiles. Then read them.\n" +
		"→ Bash ls\n" +
		"  │ early\n" +
		"  │ a.txt\n" +
		"  │ b.txt\n" +
		"  │ \uFFFD]0;title\uFFFD\n" +
		"← a.txt b.txt\n" +
		"· model: Done.\n"
	if got := out.String(); got != want {
		t.Errorf("shown:\n%s\nwant:\n%s", got, want)
	}
}

// TestDurableLinesArePrintable checks that the lines of the durable
// record, which quote the model's text, a call's input and a command's
// output, are shown as the live pieces are: what a terminal would act on
// is shown, not acted on.
func TestDurableLinesArePrintable(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	v := newLiveView(&out)
	call := uuid.MustParse("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b")
	v.line(progress(&event.ToolDispatched{Call: call, Name: "Bash", Summary: "printf '\x1b]0;owned\x07'"}))
	v.line(progress(&event.ToolCompleted{Call: call, Name: "Bash", Output: "\x1b[2J\u009b31mcleared"}))
	want := "→ Bash [3f4a5b] printf '\uFFFD]0;owned\uFFFD'\n" +
		"← Bash [3f4a5b] \uFFFD[2J\uFFFD31mcleared\n"
	if got := out.String(); got != want {
		t.Errorf("shown %q, want %q", got, want)
	}
}

// Output a call wrote that the live subject did not bring before its
// result (late, or lost) is shown from the result, after what was shown;
// a call that showed nothing live shows nothing more.
func TestLiveViewEndsOutputFromTheResult(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	v := newLiveView(&out)
	call, quiet := uuid.New(), uuid.New()
	v.callDispatched(call)
	hearing(t, v, event.Live{Kind: event.LiveOutput, Call: call, Name: "Bash", Text: "first\n"})
	v.callCompleted(call, "first\nsecond\n")
	v.line("← first second")
	v.callDispatched(quiet)
	v.callCompleted(quiet, "not shown live\n")
	v.line("← done")
	if want := outputPrefix + "first\n" + outputPrefix + "second\n← first second\n← done\n"; out.String() != want {
		t.Errorf("shown:\n%s\nwant:\n%s", out.String(), want)
	}
}

// The pieces of a turn are shown in the order they came, while the log's
// lines lock the view as they come: a piece the view's goroutine has just
// taken is not overtaken by later ones a log line would show first.
func TestLiveViewKeepsPiecesInOrder(t *testing.T) {
	t.Parallel()
	_, nc, _ := natstest.Run(t)
	session := uuid.New()
	const pieces = 8
	var want strings.Builder
	want.WriteString(modelPrefix)
	for seq := 1; seq <= pieces; seq++ {
		want.WriteString(fmt.Sprint(seq, " "))
	}
	for round := range 100 {
		var out strings.Builder
		v := newLiveView(&out)
		stop, err := v.subscribe(nc, "acme", session)
		if err != nil {
			t.Fatal(err)
		}
		// The log's goroutine, showing its lines as they come.
		locking, stopLocking := context.WithCancel(t.Context())
		var locker sync.WaitGroup
		locker.Go(func() {
			for locking.Err() == nil {
				v.lock()
				v.mu.Unlock()
			}
		})
		for seq := 1; seq <= pieces; seq++ {
			b, err := json.Marshal(event.Live{Kind: event.LiveText, Turn: round + 1, Attempt: 1, Seq: seq, Text: fmt.Sprint(seq, " ")})
			if err != nil {
				t.Fatal(err)
			}
			if err := nc.Publish(bus.LiveSubject("acme", session), b); err != nil {
				t.Fatal(err)
			}
		}
		// The server sends the pieces to this connection before its
		// answer to the flush: they are all heard then, and shown once
		// the view is locked.
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		v.lock()
		v.mu.Unlock()
		stopLocking()
		locker.Wait()
		stop()
		if got := out.String(); got != want.String() {
			t.Fatalf("round %d shows:\n%q\nwant:\n%q", round, got, want.String())
		}
	}
}
