package gateway

import (
	"net/url"
	"slices"

	"github.com/google/uuid"

	"corral.dev/pkg/event"
	"corral.dev/pkg/livetext"
	"corral.dev/services/gateway/internal/wire"
)

// A stream asked with event_deltas also carries previews of the events a
// model turn is writing, made from the live pieces of the session's
// output (live.<tenant>.<session>, core NATS): an event_start naming the
// event to come (its type and ID), then, for an agent.message, an
// event_delta with each piece of its text. The event itself, when its
// response is recorded, carries the same ID and the whole text: the log
// stays the truth, and a preview is best-effort. Pieces lost (core NATS
// keeps nothing), or a stream joined mid-turn, end a turn's previews; a
// new attempt of the turn starts them again (an event_start resets what
// was shown of that ID).

// Types of events that can be previewed.
const (
	previewMessage  = "agent.message"
	previewThinking = "agent.thinking"
)

// deltaTypes reads the event_deltas parameter: the types of events whose
// previews the stream carries.
func deltaTypes(q url.Values) (map[string]bool, error) {
	out := make(map[string]bool)
	for _, t := range values(q, "event_deltas") {
		if t != previewMessage && t != previewThinking {
			return nil, badRequest("event_deltas: %q: previews are of %s and %s events", t, previewMessage, previewThinking)
		}
		out[t] = true
	}
	return out, nil
}

// previews turns a session's live pieces into the API's previews.
type previews struct {
	session uuid.UUID
	want    map[string]bool
	text    livetext.Turn
	// recorded is the last turn whose response the stream has folded:
	// none of its events is previewed again.
	recorded int
	// turn and attempt are the ask the blocks in started were previewed
	// in.
	turn, attempt int
	started       map[int]bool
}

func newPreviews(session uuid.UUID, want map[string]bool, recorded int) *previews {
	p := &previews{session: session, want: want, started: make(map[int]bool)}
	p.record(recorded)
	return p
}

// record says the response of turn is folded.
func (p *previews) record(turn int) {
	if turn > 0 {
		p.recorded = max(p.recorded, turn)
		p.text.Recorded(turn)
	}
}

// previewStart is an event_start.
type previewStart struct {
	Type  string       `json:"type"`
	Event previewEvent `json:"event"`
}

type previewEvent struct {
	Type string `json:"type"`
	ID   string `json:"id"`
}

// previewDelta is an event_delta of an agent.message: a piece of its
// one text block.
type previewDelta struct {
	Type    string       `json:"type"`
	EventID string       `json:"event_id"`
	Delta   contentDelta `json:"delta"`
}

type contentDelta struct {
	Type    string     `json:"type"`
	Index   int        `json:"index"`
	Content wire.Block `json:"content"`
}

// hear returns the previews a live piece makes.
func (p *previews) hear(l event.Live) []any {
	if l.Turn <= p.recorded {
		return nil
	}
	change := p.text.Hear(l)
	if l.Turn != p.turn || l.Attempt != p.attempt || change == livetext.Restarted {
		p.turn, p.attempt = l.Turn, l.Attempt
		clear(p.started)
	}
	id := wire.BlockID(p.session, l.Turn, l.Index)
	var out []any
	start := func(typ string) {
		if !p.started[l.Index] {
			p.started[l.Index] = true
			out = append(out, previewStart{Type: "event_start", Event: previewEvent{Type: typ, ID: id}})
		}
	}
	switch {
	case l.Kind == event.LiveThinking && p.want[previewThinking]:
		// Start-only: the agent.thinking event ends it.
		start(previewThinking)
	case l.Kind != event.LiveText || !p.want[previewMessage]:
	case change == livetext.Started || change == livetext.Appended ||
		// A new ask whose first piece was kept (the text is the piece's
		// alone: none was lost).
		change == livetext.Restarted && l.Text != "" && p.text.Text() == l.Text:
		start(previewMessage)
		out = append(out, previewDelta{Type: "event_delta", EventID: id, Delta: contentDelta{Type: "content_delta", Content: wire.Text(l.Text)}})
	}
	return slices.Clip(out)
}
