package sandboxmanager

import (
	"encoding/json"
	"unicode/utf8"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/services/sandbox-manager/internal/sandbox"
)

// liveCut is the last piece of a call's live output once it wrote more
// than its bound ([sandbox.Config.LiveLimit]): the call goes on, and its
// result is what it would have been.
const liveCut = "\n[live output stops here, at its bound: the call goes on, and its result follows]\n"

// liveOutput returns what publishes call c's output as it is written
// (stdout and stderr as one stream, as its result holds them) on its
// session's live subject ([bus.LiveSubject]): core NATS, from this
// process's connection (the sandbox has none), no flush, so the call never
// waits on it; a piece the connection cannot take is dropped. The result
// recorded is the durable one, and is the same whether anyone listens.
func (s *Service) liveOutput(c *event.ToolCall) sandbox.Output {
	nc := s.js.Conn()
	subject := bus.LiveSubject(c.Tenant, c.Session)
	seq := 0
	publish := func(text string) {
		seq++
		b, err := json.Marshal(event.Live{Kind: event.LiveOutput, Call: c.Call, Name: c.Name, Seq: seq, Text: text})
		if err != nil {
			return
		}
		_ = nc.Publish(subject, b)
	}
	// held is the start of a character the last piece split, sent with
	// the next.
	var held []byte
	return func(p []byte, cut bool) {
		text := append(held, p...)
		held = nil
		if !cut {
			if i := splitRune(text); i < len(text) {
				held = append([]byte(nil), text[i:]...)
				text = text[:i]
			}
		}
		if len(text) > 0 {
			publish(string(text))
		}
		if cut {
			publish(liveCut)
		}
	}
}

// splitRune returns where an incomplete UTF-8 sequence ends p, or len(p)
// when none does.
func splitRune(p []byte) int {
	for i := len(p) - 1; i >= 0 && i >= len(p)-utf8.UTFMax; i-- {
		if utf8.RuneStart(p[i]) {
			if !utf8.FullRune(p[i:]) {
				return i
			}
			break
		}
	}
	return len(p)
}
