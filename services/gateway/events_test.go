package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/model"
	"corral.dev/services/gateway/internal/wire"
)

// listPage reads one page of a session's events.
func (a *testAPI) listPage(t *testing.T, session uuid.UUID, query url.Values) wire.Page[wire.Event] {
	t.Helper()
	resp := a.get(t, "/v1/sessions/"+session.String()+"/events?"+query.Encode())
	defer resp.Body.Close()
	var page wire.Page[wire.Event]
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("list: %d, %v", resp.StatusCode, err)
	}
	return page
}

// listAll pages through a session's events, limit at a time, and returns
// them with the number of pages read.
func (a *testAPI) listAll(t *testing.T, session uuid.UUID, query url.Values) ([]string, int) {
	t.Helper()
	var ids []string
	pages := 0
	for {
		page := a.listPage(t, session, query)
		pages++
		for _, ev := range page.Data {
			ids = append(ids, ev.ID)
		}
		if page.NextPage == nil {
			return ids, pages
		}
		query.Set("page", *page.NextPage)
	}
}

// TestPagesCostWhatTheyReturn pages through a long session's events: each
// page has the events after the one before, in both orders, as one whole
// listing has them; and the key's connection is sent about each event
// once, not the whole log for each page.
func TestPagesCostWhatTheyReturn(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	session := a.startSession(t)
	const turns = 150
	for turn := 1; turn <= turns; turn++ {
		a.responded(t, session, turn, fmt.Sprintf("turn %d", turn))
	}
	whole := a.listPage(t, session, url.Values{"limit": {"1000"}})
	var want []string
	for _, ev := range whole.Data {
		want = append(want, ev.ID)
	}
	// A session's request, then per turn a span's start, a message and
	// its end.
	if len(want) != 2+3*turns || whole.NextPage != nil {
		t.Fatalf("%d events listed (next %v), want %d", len(want), whole.NextPage, 2+3*turns)
	}

	before := a.client.Stats().InMsgs
	got, pages := a.listAll(t, session, url.Values{"limit": {"10"}})
	if !slices.Equal(got, want) {
		t.Errorf("paged forwards:\n%v\nwant\n%v", got, want)
	}
	read := a.client.Stats().InMsgs - before
	// Each page asks a few questions (the index, the record, the log's
	// last sequence); reading the log for each would be pages × events.
	if most := uint64(5 * pages); read > most {
		t.Errorf("%d pages of %d events: the key's connection got %d messages, want at most %d", pages, len(want), read, most)
	}

	got, _ = a.listAll(t, session, url.Values{"limit": {"7"}, "order": {"desc"}})
	slices.Reverse(got)
	if !slices.Equal(got, want) {
		t.Errorf("paged backwards:\n%v\nwant\n%v", got, want)
	}
	got, _ = a.listAll(t, session, url.Values{"limit": {"4"}, "types": {"agent.message"}})
	if len(got) != turns {
		t.Errorf("%d agent.message events, want %d", len(got), turns)
	}

	// What is stored after is read, and only it.
	a.responded(t, session, turns+1, "the last")
	before = a.client.Stats().InMsgs
	last := a.listPage(t, session, url.Values{"limit": {"1"}, "order": {"desc"}})
	if len(last.Data) != 1 || last.Data[0].Type != "span.model_request_end" {
		t.Errorf("the newest event: %+v", last.Data)
	}
	if read := a.client.Stats().InMsgs - before; read > 10 {
		t.Errorf("a page after one more event: the key's connection got %d messages", read)
	}
}

// openStream opens a session's event stream.
func (a *testAPI) openStream(t *testing.T, session uuid.UUID, query string, header ...string) (*sseReader, func()) {
	t.Helper()
	resp := a.get(t, "/v1/sessions/"+session.String()+"/events/stream"+query, header...)
	if resp.StatusCode != http.StatusOK {
		b, _ := readBody(resp)
		t.Fatalf("stream: %d %s", resp.StatusCode, b)
	}
	return newSSEReader(resp.Body), func() { resp.Body.Close() }
}

func readBody(resp *http.Response) (string, error) {
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// next reads the next event of r within a few seconds.
func next(t *testing.T, r *sseReader) sseEvent {
	t.Helper()
	type result struct {
		ev  sseEvent
		err error
	}
	ch := make(chan result, 1)
	go func() {
		ev, err := r.next()
		ch <- result{ev, err}
	}()
	select {
	case res := <-ch:
		if res.err != nil {
			t.Fatalf("read the stream: %v", res.err)
		}
		return res.ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	panic("unreachable")
}

// TestStreamResumes checks that a stream opened with the ID of an event
// sends the events after it, then those stored after, each once.
func TestStreamResumes(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	session := a.startSession(t)
	for turn := 1; turn <= 5; turn++ {
		a.responded(t, session, turn, fmt.Sprintf("turn %d", turn))
	}
	all := a.listPage(t, session, url.Values{"limit": {"1000"}}).Data
	seen := all[6]
	r, stop := a.openStream(t, session, "", "Last-Event-ID", seen.ID)
	defer stop()
	for _, want := range all[7:] {
		if ev := next(t, r); ev.id != want.ID || ev.name != want.Type {
			t.Fatalf("resumed: %s %s, want %s %s", ev.id, ev.name, want.ID, want.Type)
		}
	}
	a.responded(t, session, 6, "turn 6")
	if ev := next(t, r); ev.name != "span.model_request_start" {
		t.Errorf("after the missed events: %s %s", ev.name, ev.data)
	}
	if ev := next(t, r); ev.name != "agent.message" || ev.id != wire.BlockID(session, 6, 0) {
		t.Errorf("then: %s %s %s", ev.id, ev.name, ev.data)
	}

	resp := a.get(t, "/v1/sessions/"+session.String()+"/events/stream", "Last-Event-ID", "sevt_nothing")
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a Last-Event-ID of no event: %d, want 400", resp.StatusCode)
	}
}

// TestStreamPreviewsTheModelsText checks that a stream asked with
// event_deltas previews the text a model turn writes, from the session's
// live pieces, under the ID of the agent.message its response makes;
// that what is lost ends a turn's previews; that a recorded turn is not
// previewed again; and that a stream not asking gets none.
func TestStreamPreviewsTheModelsText(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	session := a.startSession(t)
	plain, stopPlain := a.openStream(t, session, "")
	defer stopPlain()
	r, stop := a.openStream(t, session, "?event_deltas[]=agent.message&event_deltas[]=agent.thinking")
	defer stop()
	live := func(l event.Live) {
		t.Helper()
		b, _ := json.Marshal(l)
		if err := a.nc.Publish(bus.LiveSubject("acme", session), b); err != nil {
			t.Fatal(err)
		}
	}
	// The stream hears the live subject once it has answered.
	live(event.Live{Kind: event.LiveThinking, Turn: 1, Attempt: 1, Seq: 1, Index: 0, Text: "hmm"})
	if ev := next(t, r); ev.name != "event_start" || !strings.Contains(string(ev.data), `"type":"agent.thinking"`) {
		t.Fatalf("first: %s %s", ev.name, ev.data)
	}
	live(event.Live{Kind: event.LiveText, Turn: 2, Attempt: 1, Seq: 1, Index: 1, Text: "Hel"})
	want := wire.BlockID(session, 2, 1)
	ev := next(t, r)
	var start previewStart
	if json.Unmarshal(ev.data, &start); ev.name != "event_start" || start.Event.Type != "agent.message" || start.Event.ID != want || ev.id != "" {
		t.Fatalf("a message's preview starts with %s %s %s", ev.id, ev.name, ev.data)
	}
	var text strings.Builder
	delta := func() {
		t.Helper()
		ev := next(t, r)
		var d previewDelta
		if json.Unmarshal(ev.data, &d); ev.name != "event_delta" || d.EventID != want || d.Delta.Type != "content_delta" || d.Delta.Content.Type != "text" {
			t.Fatalf("a delta: %s %s", ev.name, ev.data)
		}
		text.WriteString(d.Delta.Content.Text)
	}
	delta()
	live(event.Live{Kind: event.LiveText, Turn: 2, Attempt: 1, Seq: 2, Index: 1, Text: "lo"})
	delta()
	if text.String() != "Hello" {
		t.Errorf("previewed %q", text.String())
	}
	// A piece lost: no more of the turn.
	live(event.Live{Kind: event.LiveText, Turn: 2, Attempt: 1, Seq: 4, Index: 1, Text: " there"})
	a.record(t, &event.ModelResponded{Header: event.NewHeader(event.TypeModelResponded, "acme", session), Turn: 2, Model: "openai:m",
		Content: []model.Block{{Type: model.ThinkingBlock, Thinking: "hmm"}, {Type: model.TextBlock, Text: "Hello there"}}})
	for _, want := range []string{"span.model_request_start", "agent.thinking", "agent.message", "span.model_request_end"} {
		ev := next(t, r)
		if ev.name != want {
			t.Fatalf("after the response: %s %s, want %s", ev.name, ev.data, want)
		}
		if want == "agent.message" && ev.id != wire.BlockID(session, 2, 1) {
			t.Errorf("the message is %s, its preview was %s", ev.id, wire.BlockID(session, 2, 1))
		}
	}
	// Late pieces of the recorded turn preview nothing.
	live(event.Live{Kind: event.LiveText, Turn: 2, Attempt: 1, Seq: 5, Index: 1, Text: "!"})
	live(event.Live{Kind: event.LiveText, Turn: 3, Attempt: 1, Seq: 1, Text: "Next"})
	if ev := next(t, r); ev.name != "event_start" || !strings.Contains(string(ev.data), wire.BlockID(session, 3, 0)) {
		t.Errorf("after a late piece: %s %s, want the next turn's preview", ev.name, ev.data)
	}
	// The stream that did not ask has the events alone.
	for _, want := range []string{"span.model_request_start", "agent.thinking", "agent.message", "span.model_request_end"} {
		if ev := next(t, plain); ev.name != want {
			t.Errorf("without event_deltas: %s %s, want %s", ev.name, ev.data, want)
		}
	}

	resp := a.get(t, "/v1/sessions/"+session.String()+"/events/stream?event_deltas[]=agent.tool_use")
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("previews of agent.tool_use: %d, want 400", resp.StatusCode)
	}
}

// TestFoldCacheKeepsItsBound checks that the folds kept stay within their
// bound, the least recently read let go first, and that a fold past the
// bound alone is not kept.
func TestFoldCacheKeepsItsBound(t *testing.T) {
	t.Parallel()
	fc := newFoldCache(1000)
	a, b, c := uuid.New(), uuid.New(), uuid.New()
	fa := fc.get("acme", a)
	fc.grew("acme", a, fa, 600)
	fb := fc.get("acme", b)
	fc.grew("acme", b, fb, 300)
	fc.get("acme", a) // read again: b is the least recently read
	fc.grew("acme", a, fa, 300)
	if fc.lru.Contains(foldKey{"acme", b}) || !fc.lru.Contains(foldKey{"acme", a}) || fc.bytes != 900 {
		t.Errorf("kept %v, %d bytes; want a alone, 900 bytes", fc.lru.Keys(), fc.bytes)
	}
	fcc := fc.get("initech", c)
	fc.grew("initech", c, fcc, 2000)
	if fc.lru.Contains(foldKey{"initech", c}) || fc.bytes > 1000 {
		t.Errorf("kept %v, %d bytes, after a fold past the bound", fc.lru.Keys(), fc.bytes)
	}
	if got := fc.get("initech", c); got == fcc {
		t.Error("a fold let go of is found again")
	}
}
