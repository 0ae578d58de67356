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
	// Call is the running call whose output this is; Name its tool, or
	// the tool of a call whose input streams.
	Call uuid.UUID `json:"call,omitzero"`
	Name string    `json:"name,omitempty"`
	// Stream is "stdout" or "stderr" for output.
	Stream string `json:"stream,omitempty"`
	Text   string `json:"text"`
}
