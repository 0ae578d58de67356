package harness

import (
	"encoding/json"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/model"
)

// liveKinds maps the kinds of the model's deltas to those of the live
// pieces that carry them.
var liveKinds = map[string]string{
	model.DeltaText:     event.LiveText,
	model.DeltaThinking: event.LiveThinking,
	model.DeltaToolUse:  event.LiveToolInput,
}

// liveOutput returns what hears the pieces of the model's answer to turn
// of st's session as they stream in, and publishes each on the session's
// live subject ([bus.LiveSubject]) at once: core NATS, no flush, so the
// step never waits on it. The connection's writer sends it within
// microseconds (its flusher is woken by the publish), or buffers it while
// the connection is down; a piece the connection cannot take is dropped.
// Nothing durable depends on it: the response the step records is whole,
// and a reader that misses pieces finds them there.
func (s *Service) liveOutput(st *state, turn int) func(model.Delta) {
	nc := s.js.Conn()
	subject := bus.LiveSubject(st.Tenant, st.Session)
	attempt, seq := 0, 0
	return func(d model.Delta) {
		kind, ok := liveKinds[d.Kind]
		if !ok || d.Text == "" && d.Name == "" {
			return
		}
		if d.Attempt != attempt {
			attempt, seq = d.Attempt, 0
		}
		seq++
		b, err := json.Marshal(event.Live{
			Kind:    kind,
			Turn:    turn,
			Attempt: d.Attempt,
			Index:   d.Index,
			Seq:     seq,
			Name:    d.Name,
			Text:    d.Text,
		})
		if err != nil {
			return
		}
		_ = nc.Publish(subject, b)
	}
}
