package modeltest

import (
	"encoding/json"
	"net/http"
	"unicode/utf8"
)

// reply is a response the server sends: whole, or as a stream of events.
type reply struct {
	// whole is the JSON body of a reply that is not streamed.
	whole any
	// events are the streamed reply.
	events []event
	// pivot is the index in events of the first text delta, or with no
	// text the first delta: where the stream holds, and where it fails.
	pivot int
}

// event is one server-sent event: its name (none for OpenAI) and its
// data, marshalled to JSON unless it is a string, sent as it is.
type event struct {
	name string
	data any
}

// stream writes rep as server-sent events, flushing each, pausing at its
// pivot for t's Hold and failing there as f says.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, p protocol, rep reply, t Turn, f fault) {
	w.Header().Set("content-type", "text/event-stream")
	w.Header().Set("cache-control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	for i, ev := range rep.events {
		// Flushed at the first piece of content, which a client shows as
		// it comes, and on a fault; the rest goes out as the server's
		// buffer fills and at the end, in a few writes rather than one
		// per event, so that the fake's own work weighs little in the
		// benchmarks that time a client against it.
		if err := writeEvent(w, rc, ev, i == rep.pivot); err != nil {
			return // the client went away
		}
		if i != rep.pivot {
			continue
		}
		if t.OnFirstDelta != nil {
			t.OnFirstDelta()
		}
		switch {
		case f.cut:
			panic(http.ErrAbortHandler) // closes the connection mid-stream
		case f.errorKind != "":
			_ = writeEvent(w, rc, p.errorEvent(f.errorKind), true)
			return
		}
		if t.Hold != nil {
			select {
			case <-t.Hold:
			case <-r.Context().Done():
				return
			}
		}
	}
}

func writeEvent(w http.ResponseWriter, rc *http.ResponseController, ev event, flush bool) error {
	var data []byte
	switch d := ev.data.(type) {
	case string:
		data = []byte(d)
	default:
		var err error
		if data, err = json.Marshal(d); err != nil {
			panic(err) // the server's own events always marshal
		}
	}
	buf := make([]byte, 0, len(ev.name)+len(data)+16)
	if ev.name != "" {
		buf = append(buf, "event: "...)
		buf = append(buf, ev.name...)
		buf = append(buf, '\n')
	}
	buf = append(buf, "data: "...)
	buf = append(buf, data...)
	buf = append(buf, "\n\n"...)
	if _, err := w.Write(buf); err != nil || !flush {
		return err
	}
	return rc.Flush()
}

// Pieces of a streamed text: a few tokens each, as the providers send,
// and at most maxPieces of them, so that long texts stream in bounded
// time.
const (
	minPiece  = 16
	maxPieces = 64
)

// pieces splits s into the deltas that stream it, never inside a rune.
func pieces(s string) []string {
	size := max(minPiece, len(s)/maxPieces+1)
	var out []string
	for len(s) > 0 {
		n := min(size, len(s))
		for n < len(s) && !utf8.RuneStart(s[n]) {
			n++
		}
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}
