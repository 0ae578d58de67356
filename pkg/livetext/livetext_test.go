package livetext_test

import (
	"testing"

	"corral.dev/pkg/event"
	"corral.dev/pkg/livetext"
)

func text(turn, attempt, seq int, s string) event.Live {
	return event.Live{Kind: event.LiveText, Turn: turn, Attempt: attempt, Seq: seq, Text: s}
}

func TestTurn(t *testing.T) {
	t.Parallel()
	type step struct {
		piece    event.Live
		recorded int // > 0: Recorded(recorded) instead of Hear
		want     livetext.Change
		text     string // Text after, or what Recorded returns
	}
	input := event.Live{Kind: event.LiveToolInput, Turn: 1, Attempt: 1, Seq: 3, Name: "Bash", Text: `{"command"`}
	output := event.Live{Kind: event.LiveOutput, Seq: 1, Text: "out\n"}
	tests := []struct {
		name  string
		steps []step
	}{
		{"streams", []step{
			{piece: text(1, 1, 1, "Hel"), want: livetext.Started, text: "Hel"},
			{piece: text(1, 1, 2, "lo"), want: livetext.Appended, text: "Hello"},
			{piece: input, want: livetext.Ignored, text: "Hello"},
			{piece: output, want: livetext.Ignored, text: "Hello"},
			{recorded: 1, text: "Hello"},
			{piece: text(1, 1, 4, " late"), want: livetext.Ignored, text: ""},
			{piece: text(2, 1, 1, "Next"), want: livetext.Started, text: "Next"},
		}},
		{"a new attempt voids the text", []step{
			{piece: text(1, 1, 1, "Hel"), want: livetext.Started, text: "Hel"},
			{piece: text(1, 2, 1, "Hi"), want: livetext.Restarted, text: "Hi"},
			{piece: text(1, 2, 2, "!"), want: livetext.Appended, text: "Hi!"},
			{recorded: 1, text: "Hi!"},
		}},
		{"a new ask voids the text", []step{
			{piece: text(3, 1, 1, "Hel"), want: livetext.Started, text: "Hel"},
			{piece: text(3, 1, 2, "lo"), want: livetext.Appended, text: "Hello"},
			{piece: text(3, 1, 1, "Hi"), want: livetext.Restarted, text: "Hi"},
		}},
		{"a restart before any text shows nothing", []step{
			{piece: event.Live{Kind: event.LiveThinking, Turn: 1, Attempt: 1, Seq: 1, Text: "hmm"}, want: livetext.Ignored},
			{piece: text(1, 2, 1, "Hi"), want: livetext.Started, text: "Hi"},
		}},
		{"lost pieces stop the text", []step{
			{piece: text(1, 1, 1, "Hel"), want: livetext.Started, text: "Hel"},
			{piece: text(1, 1, 3, "lo"), want: livetext.Ignored, text: "Hel"},
			{piece: text(1, 1, 4, "!"), want: livetext.Ignored, text: "Hel"},
			{recorded: 1, text: "Hel"},
		}},
		{"joined mid-turn", []step{
			{piece: text(1, 1, 5, "lo"), want: livetext.Ignored, text: ""},
			{piece: text(1, 1, 6, "!"), want: livetext.Ignored, text: ""},
			{piece: text(2, 1, 1, "Hi"), want: livetext.Started, text: "Hi"},
		}},
		{"a recorded turn is shown no more", []step{
			{recorded: 2},
			{piece: text(2, 1, 1, "Hi"), want: livetext.Ignored},
			{piece: text(1, 1, 1, "old"), want: livetext.Ignored},
			{piece: text(3, 1, 1, "new"), want: livetext.Started, text: "new"},
		}},
		{"a response of another turn", []step{
			{piece: text(2, 1, 1, "Hi"), want: livetext.Started, text: "Hi"},
			{recorded: 1, text: ""},
			{piece: text(2, 1, 2, "!"), want: livetext.Appended, text: "Hi!"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var turn livetext.Turn
			for i, s := range tc.steps {
				if s.recorded > 0 {
					if got := turn.Recorded(s.recorded); got != s.text {
						t.Errorf("step %d: Recorded(%d) = %q, want %q", i, s.recorded, got, s.text)
					}
					continue
				}
				if got := turn.Hear(s.piece); got != s.want {
					t.Errorf("step %d: Hear(%+v) = %v, want %v", i, s.piece, got, s.want)
				}
				if got := turn.Text(); got != s.text {
					t.Errorf("step %d: Text = %q, want %q", i, got, s.text)
				}
			}
		})
	}
}

// TestTurnKeepsItsBound checks that the text a Turn keeps stays within
// MaxText however many pieces come, so that a flood of pieces cannot grow
// a reader's memory without end: past the bound it shows nothing more of
// the turn, and the next turn shows again.
func TestTurnKeepsItsBound(t *testing.T) {
	t.Parallel()
	var turn livetext.Turn
	piece := string(make([]byte, 1<<20))
	seq := 0
	for range 2 * livetext.MaxText / len(piece) {
		seq++
		turn.Hear(text(1, 1, seq, piece))
	}
	if n := len(turn.Text()); n > livetext.MaxText {
		t.Errorf("a turn keeps %d bytes, want at most %d", n, livetext.MaxText)
	}
	if got := turn.Hear(text(1, 1, seq+1, "more")); got != livetext.Ignored {
		t.Errorf("a piece past the bound: %v, want it ignored", got)
	}
	if got := turn.Hear(text(1, 2, 1, piece)); got != livetext.Restarted || turn.Text() != piece {
		t.Errorf("a new attempt after the bound: %v with %d bytes, want it restarted with its piece", got, len(turn.Text()))
	}
	if got := turn.Hear(text(2, 1, 1, "Next")); got != livetext.Started || turn.Text() != "Next" {
		t.Errorf("the next turn: %v %q, want it started", got, turn.Text())
	}
}
