package event

import "github.com/google/uuid"

// Live kinds.
const (
	// LiveText, LiveThinking and LiveToolInput are pieces of a model
	// turn as it streams: its text, its thinking, a call's input JSON.
	LiveText      = "text"
	LiveThinking  = "thinking"
	LiveToolInput = "tool_input"
	// LiveOutput is output of a running call (Bash), as it is produced.
	LiveOutput = "output"
)

// Live is a piece of a session's output as it comes, published on
// [corral.dev/pkg/bus.LiveSubject] over core NATS: nothing keeps it, and
// a reader that misses some finds the whole in the log. It is not a
// session event and is never believed as one.
type Live struct {
	Kind string `json:"kind"`
	// Turn and Attempt place a model delta: a new attempt of the same
	// turn (the stream was cut and the turn asked again) voids what the
	// attempts before it showed.
	Turn    int `json:"turn,omitempty"`
	Attempt int `json:"attempt,omitempty"`
	// Index is the content block's index in the turn's response.
	Index int `json:"index,omitempty"`
	// Seq counts the pieces of one attempt of a turn, or of one call's
	// output, from 1. A piece of the same Attempt whose Seq is not above
	// the last one heard starts a new ask of the turn (the harness asking
	// it died, and another asks it again): it voids what was shown of the
	// turn, as a new Attempt does. A Seq more than one above the last
	// follows pieces lost.
	Seq int `json:"seq,omitempty"`
	// Call is the running call whose output this is; Name its tool, or
	// the tool of a call whose input streams.
	Call uuid.UUID `json:"call,omitzero"`
	Name string    `json:"name,omitempty"`
	// Stream is "stdout" or "stderr" for output, or empty where the two
	// are one stream as written (a Bash call's, as its result holds
	// them).
	Stream string `json:"stream,omitempty"`
	Text   string `json:"text"`
}
