// Package livetext follows the text of a session's model turns from the
// live pieces of its output ([event.Live]), for the clients that show it
// as it streams (the CLI, the Slack bridge). Live pieces go over core
// NATS: some may be lost, a reader may join mid-turn, and a turn may be
// asked again (a new attempt of the same ask, or a new ask after the
// harness asking it died), which voids what was shown of it. A [Turn]
// sorts that out, so that what it shows is always the start of the text
// the response records, or is said to be voided.
package livetext

import (
	"strings"

	"corral.dev/pkg/event"
)

// Change is what [Turn.Hear] made of a piece.
type Change int

const (
	// Ignored: the piece adds nothing to the text shown. It is not text,
	// or is of a turn recorded already, or follows pieces lost.
	Ignored Change = iota
	// Started: the piece is the first text shown of a turn; Text is the
	// piece's.
	Started
	// Appended: the piece's text follows the text shown.
	Appended
	// Restarted: the turn is being asked again, and the text shown of it
	// is void; Text is the piece's (which may be empty).
	Restarted
)

// MaxText bounds the text of a turn a [Turn] keeps, in bytes: far more
// than a model's response holds. Pieces past it add nothing, as pieces
// after one lost do.
const MaxText = 4 << 20

// Turn follows the text of the turn being asked. Its zero value is ready
// to use; it is not safe for concurrent use.
type Turn struct {
	turn, attempt, seq int
	text               strings.Builder
	// lost is set once pieces of the ask were lost (or the ask was
	// joined after its start): nothing more of it is shown.
	lost bool
	// recorded is the last turn whose response is recorded.
	recorded int
}

// Hear takes the next live piece heard, and says what it changed.
func (t *Turn) Hear(l event.Live) Change {
	switch l.Kind {
	case event.LiveText, event.LiveThinking, event.LiveToolInput:
	default:
		return Ignored
	}
	if l.Turn <= t.recorded || l.Turn < t.turn {
		return Ignored
	}
	restart := false
	switch {
	case l.Turn > t.turn:
		t.reset(l.Turn, l.Attempt)
	case l.Attempt != t.attempt || l.Seq <= t.seq:
		// A new attempt of the ask, or a new ask of the turn, whose
		// pieces count from 1 again.
		restart = t.text.Len() > 0
		t.reset(l.Turn, l.Attempt)
	}
	if l.Seq != t.seq+1 {
		t.lost = true
	}
	t.seq = l.Seq
	if l.Kind == event.LiveText && t.text.Len()+len(l.Text) > MaxText {
		// More than a response holds: whoever sends it, a reader
		// keeps no more of it.
		t.lost = true
	}
	switch {
	case restart:
		if !t.lost && l.Kind == event.LiveText {
			t.text.WriteString(l.Text)
		}
		return Restarted
	case t.lost || l.Kind != event.LiveText || l.Text == "":
		return Ignored
	}
	started := t.text.Len() == 0
	t.text.WriteString(l.Text)
	if started {
		return Started
	}
	return Appended
}

// Text returns the text shown of the turn being asked.
func (t *Turn) Text() string { return t.text.String() }

// Recorded says the response to turn is recorded: it returns the text
// shown of it ("" if none was), and forgets it. Pieces of that turn, or
// of one before, are ignored from then on.
func (t *Turn) Recorded(turn int) string {
	var shown string
	if turn == t.turn {
		shown = t.text.String()
	}
	t.recorded = max(t.recorded, turn)
	if t.turn <= turn {
		t.reset(turn, 0)
	}
	return shown
}

func (t *Turn) reset(turn, attempt int) {
	t.turn, t.attempt, t.seq, t.lost = turn, attempt, 0, false
	t.text.Reset()
}
