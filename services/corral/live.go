package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"unicode"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"golang.org/x/term"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/livetext"
)

// outputPrefix starts each line of a running call's output.
const outputPrefix = "  │ "

// modelPrefix starts the model's text of a turn.
const modelPrefix = "· model: "

// restartLine is shown when the model's text shown of a turn is void: the
// turn is being asked again.
const restartLine = "(the model's answer was cut; asking again)"

// maxEarly bounds the output a view keeps of calls whose dispatch it has
// not shown yet.
const maxEarly = 256 << 10

// liveView shows a session's output as it comes, between the lines of its
// durable record: the model's text as it streams, and a running call's
// output line by line. Both the session's live subject and its log write
// through it, from their goroutines; it keeps their lines whole.
//
// What the live subject carried before an event of the log is shown before
// it: the connection reads both in the order the server sent them, and a
// line of the log is shown only once what the live subject brought so far
// is. Pieces of a turn heard after its response is shown, and output of a
// call after its result, are dropped (the rest of a call's output is shown
// from its result); a call's output heard before its
// dispatch is shown is kept until then (up to maxEarly).
type liveView struct {
	mu sync.Mutex
	w  io.Writer
	// heard is where the live subject's messages wait to be shown. Only
	// the view's own goroutine takes them (see [liveView.lock]), so that
	// none is shown out of order; syncs asks it to, and stopped is closed
	// once it has stopped.
	heard   chan *nats.Msg
	syncs   chan chan struct{}
	stopped chan struct{}
	// open is the kind of the line left open, if any (text of the model,
	// output), and call the call whose output it is.
	open openLine
	call uuid.UUID
	turn livetext.Turn
	// held is set while the log written before the view started is shown:
	// pieces heard meanwhile wait in queue.
	held  bool
	queue []event.Live
	// dispatched and completed are the calls shown dispatched, and with
	// their results; early the output of calls not yet shown dispatched.
	dispatched, completed map[uuid.UUID]bool
	early                 map[uuid.UUID][]string
	earlyBytes            int
	// shown is the output shown of each call that showed some, until its
	// result, whose rest it then shows (up to maxShown a call).
	shown map[uuid.UUID]*strings.Builder
}

// maxShown bounds the output a view keeps of one call's, to show the rest
// of it from its result: the sandbox-manager's bound on live output.
const maxShown = 1 << 20

type openLine int

const (
	closed openLine = iota
	textLine
	outputLine
)

func newLiveView(w io.Writer) *liveView {
	return &liveView{w: w, dispatched: map[uuid.UUID]bool{}, completed: map[uuid.UUID]bool{}, early: map[uuid.UUID][]string{}, shown: map[uuid.UUID]*strings.Builder{}}
}

// subscribe has v hear session's live subject on nc, from the moment it
// returns: it waits for the server to have the subscription. It returns
// what stops it, which the caller calls once done with v.
func (v *liveView) subscribe(nc *nats.Conn, tenant string, session uuid.UUID) (stop func(), err error) {
	heard := make(chan *nats.Msg, 4096)
	sub, err := nc.ChanSubscribe(bus.LiveSubject(tenant, session), heard)
	if err != nil {
		return nil, fmt.Errorf("follow the live output of session %s: %w", session, err)
	}
	if err := nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("follow the live output of session %s: %w", session, err)
	}
	syncs, stopped := make(chan chan struct{}), make(chan struct{})
	v.mu.Lock()
	v.heard, v.syncs, v.stopped = heard, syncs, stopped
	v.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			case m := <-heard:
				v.mu.Lock()
				v.take(m)
				v.drain()
				v.mu.Unlock()
			case locked := <-syncs:
				// Locked for the one who asked, who unlocks it.
				v.mu.Lock()
				v.drain()
				close(locked)
			}
		}
	}()
	return func() {
		_ = sub.Unsubscribe()
		close(done)
		<-stopped
	}, nil
}

// lock locks v, once it has shown what the live subject brought so far.
// The view's goroutine takes the lock and shows it, and hands the lock
// over: were the caller to take from heard itself, a message the
// goroutine had just taken, not yet shown, would be shown after later
// ones.
func (v *liveView) lock() {
	v.mu.Lock()
	syncs, stopped := v.syncs, v.stopped
	v.mu.Unlock()
	if syncs != nil {
		locked := make(chan struct{})
		select {
		case syncs <- locked:
			<-locked
			return
		case <-stopped:
		}
	}
	v.mu.Lock()
	v.drain()
}

// drain takes every message heard that waits.
func (v *liveView) drain() {
	for {
		select {
		case m := <-v.heard:
			v.take(m)
		default:
			return
		}
	}
}

// take shows the piece m carries, or queues it while v is held.
func (v *liveView) take(m *nats.Msg) {
	var l event.Live
	if json.Unmarshal(m.Data, &l) != nil {
		return
	}
	if v.held {
		if len(v.queue) < 1<<16 {
			v.queue = append(v.queue, l)
		}
		return
	}
	v.show(l)
}

// hold keeps what is heard from now until release.
func (v *liveView) hold() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.held = true
}

// release shows what was heard since hold, then what comes as it comes.
func (v *liveView) release() {
	v.lock()
	defer v.mu.Unlock()
	v.held = false
	for _, l := range v.queue {
		v.show(l)
	}
	v.queue = nil
}

func (v *liveView) show(l event.Live) {
	if l.Kind == event.LiveOutput {
		v.output(l.Call, l.Text)
		return
	}
	switch v.turn.Hear(l) {
	case livetext.Started:
		v.end()
		v.text(modelPrefix + l.Text)
	case livetext.Appended:
		v.text(l.Text)
	case livetext.Restarted:
		v.end()
		v.write(restartLine + "\n")
		if t := v.turn.Text(); t != "" {
			v.text(modelPrefix + t)
		}
	}
}

// output shows text a running call wrote, each line after outputPrefix.
func (v *liveView) output(call uuid.UUID, text string) {
	if v.completed[call] || text == "" {
		return
	}
	if !v.dispatched[call] {
		if v.earlyBytes+len(text) <= maxEarly {
			v.early[call] = append(v.early[call], text)
			v.earlyBytes += len(text)
		}
		return
	}
	if v.open != outputLine || v.call != call {
		v.end()
	}
	if b := v.shown[call]; b == nil {
		v.shown[call] = &strings.Builder{}
	}
	if b := v.shown[call]; b.Len()+len(text) <= maxShown {
		b.WriteString(text)
	}
	for text != "" {
		if v.open == closed {
			v.write(outputPrefix)
			v.open, v.call = outputLine, call
		}
		line, rest, newline := strings.Cut(text, "\n")
		v.write(printable(line))
		if newline {
			v.write("\n")
			v.open = closed
		}
		text = rest
	}
}

// text writes the model's text, leaving the line open unless it ends one.
func (v *liveView) text(s string) {
	if s == "" {
		return
	}
	v.write(printable(s))
	v.open = textLine
	if strings.HasSuffix(s, "\n") {
		v.open = closed
	}
}

// end ends the line left open.
func (v *liveView) end() {
	if v.open != closed {
		v.write("\n")
		v.open = closed
	}
}

func (v *liveView) write(s string) { _, _ = io.WriteString(v.w, s) }

// line shows a line of the durable record: made printable as what comes
// live is, since it quotes the model's text, a call's input and a
// command's output too.
func (v *liveView) line(s string) {
	v.lock()
	defer v.mu.Unlock()
	v.end()
	v.write(printable(s) + "\n")
}

// responded says the response to turn is recorded, and returns the text
// of it shown live ("" if none was); its line is left open for the rest.
func (v *liveView) responded(turn int) string {
	v.lock()
	defer v.mu.Unlock()
	return v.turn.Recorded(turn)
}

// rest shows, after the text of a turn shown live, the rest of text, the
// turn's whole text as recorded, and ends the line. Text shown that does
// not start the recorded text (pieces of an ask voided unseen) is followed
// by the recorded text whole.
func (v *liveView) rest(shown, text string) {
	v.lock()
	defer v.mu.Unlock()
	if rest, ok := strings.CutPrefix(text, shown); ok {
		v.text(rest)
	} else {
		v.end()
		v.write(restartLine + "\n")
		v.text(modelPrefix + text)
	}
	v.end()
}

// callDispatched says the dispatch of call is shown: its output is shown from
// now, what came before first.
func (v *liveView) callDispatched(call uuid.UUID) {
	v.lock()
	defer v.mu.Unlock()
	v.dispatched[call] = true
	early := v.early[call]
	delete(v.early, call)
	for _, s := range early {
		v.earlyBytes -= len(s)
		v.output(call, s)
	}
}

// callCompleted says the result of call, with output, is recorded: the
// rest of what it wrote is shown from there, and nothing more of what is
// heard.
func (v *liveView) callCompleted(call uuid.UUID, output string) {
	v.lock()
	defer v.mu.Unlock()
	// Output heard after its result, or never (the live subject keeps
	// nothing), is in the result: what of it follows what was shown is
	// shown, so that the lines end as the call's did.
	if b := v.shown[call]; b != nil {
		if rest, ok := strings.CutPrefix(output, b.String()); ok {
			v.output(call, rest)
		}
		delete(v.shown, call)
	}
	v.completed[call] = true
	for _, s := range v.early[call] {
		v.earlyBytes -= len(s)
	}
	delete(v.early, call)
	if v.open == outputLine && v.call == call {
		v.end()
	}
}

// printable returns s with what a terminal would act on rather than show
// taken out: a carriage return is dropped, and every other control
// character but newline and tab (an escape sequence's start among them) is
// shown as U+FFFD. What the model and its commands write is shown as it
// comes, and must not move the cursor, recolour or retitle the terminal,
// or hide what came before.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\t':
			return r
		case r == '\r':
			return -1
		case unicode.IsControl(r):
			return unicode.ReplacementChar
		}
		return r
	}, s)
}

// oneTerminal reports whether stdout and stderr are both a terminal: the
// one a person watches, which shows the answer as it streams on stderr
// and need not show it again on stdout.
func oneTerminal(stdout, stderr io.Writer) bool {
	return isTerminal(stdout) && isTerminal(stderr)
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// isResponse reports whether ev is a model's response.
func isResponse(ev any) bool {
	_, ok := ev.(*event.ModelResponded)
	return ok
}
