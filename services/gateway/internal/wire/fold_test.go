package wire

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/event"
	"corral.dev/pkg/model"
)

var session = uuid.MustParse("01a2146f-eb49-73ee-ae87-2d89f74e5943")

func header(typ string, sec int) event.Header {
	h := event.NewHeader(typ, "acme", session)
	h.Time = time.Date(2026, 11, 25, 10, 0, sec, 0, time.UTC)
	return h
}

// fold folds evs, the n-th at stream sequence n+1, and returns the API's
// events.
func fold(evs ...event.Event) []Event {
	var f Folder
	var out []Event
	for i, ev := range evs {
		out = append(out, f.Fold(uint64(i+1), ev)...)
	}
	return out
}

func typesOf(evs []Event) string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Type)
	}
	return strings.Join(out, " ")
}

// TestFoldATurn folds a request whose model calls a tool, has it held for
// a reviewer, then answers: the API's events, in the API's order, the
// result naming its call's agent.tool_use, usage on the span's end.
func TestFoldATurn(t *testing.T) {
	t.Parallel()
	call, prepare, request := uuid.New(), uuid.New(), uuid.New()
	input := json.RawMessage(`{"command":"rm -rf x"}`)
	evs := fold(
		&event.SessionRequested{Header: header(event.TypeSessionRequested, 0), Request: request, User: "ada", Model: "openai:m", Prompt: "clean up", Prepare: prepare},
		&event.ToolCompleted{Header: header(event.TypeToolCompleted, 1), Call: prepare, Name: event.PrepareTool, Output: "laid out"},
		&event.ModelResponded{Header: header(event.TypeModelResponded, 3), Turn: 1, Model: "openai:m",
			Content: []model.Block{{Type: model.ThinkingBlock, Thinking: "hm"}, {Type: model.TextBlock, Text: "Cleaning."},
				{Type: model.ToolUseBlock, ID: "t1", Name: "Bash", Input: input}},
			Calls: []event.Call{{ID: call, ToolUseID: "t1", Name: "Bash"}},
			Usage: model.Usage{InputTokens: 100, OutputTokens: 10, CacheReadTokens: 60, CacheWriteTokens: 30}},
		&event.ApprovalRequested{Header: header(event.TypeApprovalRequested, 4), Call: call, Tool: "Bash", Input: input},
		&event.ApprovalDecided{Header: header(event.TypeApprovalDecided, 5), Call: call, Approved: true},
		&event.ToolCompleted{Header: header(event.TypeToolCompleted, 6), Call: call, Name: "Bash", Output: "gone"},
		&event.ModelResponded{Header: header(event.TypeModelResponded, 7), Turn: 2, Content: []model.Block{{Type: model.TextBlock, Text: "Done."}}},
		&event.SessionCompleted{Header: header(event.TypeSessionCompleted, 7), Answer: "Done."},
	)
	want := "user.message session.status_running " +
		"span.model_request_start agent.thinking agent.message agent.tool_use span.model_request_end " +
		"session.status_idle session.status_running agent.tool_result " +
		"span.model_request_start agent.message span.model_request_end session.status_idle"
	if got := typesOf(evs); got != want {
		t.Fatalf("events:\n got %s\nwant %s", got, want)
	}
	if evs[0].ID != ID(request, 0) {
		t.Errorf("the message's ID is %s, want the request's, %s, as the gateway answered its sending", evs[0].ID, ID(request, 0))
	}
	use, res := evs[5], evs[9]
	if use.ID != ToolUseID(call) || use.Name != "Bash" || string(use.Input) != string(input) {
		t.Errorf("tool use %+v", use)
	}
	if res.ToolUseID != use.ID || res.Content[0].Text != "gone" || *res.IsError {
		t.Errorf("tool result %+v, want the call's", res)
	}
	if held := evs[7].StopReason; held.Type != "requires_action" || !slices.Equal(held.EventIDs, []string{use.ID}) {
		t.Errorf("held: %+v", held)
	}
	end := evs[6]
	if end.ModelRequestStartID != evs[2].ID || *end.ModelUsage != (ModelUsage{InputTokens: 10, OutputTokens: 10, CacheReadInputTokens: 60, CacheCreationInputTokens: 30}) {
		t.Errorf("span end %+v usage %+v", end, end.ModelUsage)
	}
	if start := evs[2].ProcessedAt; !start.Equal(time.Date(2026, 11, 25, 10, 0, 1, 0, time.UTC)) {
		t.Errorf("the model request starts at %s, want the event before it", start)
	}
	if last := evs[len(evs)-1].StopReason; last.Type != "end_turn" {
		t.Errorf("ends %+v", last)
	}
	ids := map[string]bool{}
	for i, e := range evs {
		if ids[e.ID] {
			t.Errorf("ID %s twice", e.ID)
		}
		ids[e.ID] = true
		if i > 0 && !evs[i-1].Cursor.Before(e.Cursor) {
			t.Errorf("cursor %s after %s", e.Cursor, evs[i-1].Cursor)
		}
	}
}

func TestFoldEnds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ev   event.Event
		want string
	}{
		{"a stop idles", &event.SessionStopped{Header: header(event.TypeSessionStopped, 1)}, "session.status_idle:end_turn"},
		{"a failure terminates", &event.SessionFailed{Header: header(event.TypeSessionFailed, 1), Code: event.CodeModelError, Reason: "down"}, "session.error:model_request_failed_error session.status_terminated"},
		{"a tenant's budget idles", &event.SessionFailed{Header: header(event.TypeSessionFailed, 1), Code: event.CodeBudget}, "session.status_idle:budget_reached"},
		{"a pause idles", &event.SessionPaused{Header: header(event.TypeSessionPaused, 1)}, "session.status_idle:budget_reached"},
		{"a resume runs", &event.SessionResumed{Header: header(event.TypeSessionResumed, 1)}, "session.status_running"},
		{"a compaction", &event.ContextCompacted{Header: header(event.TypeContextCompacted, 1)}, "agent.thread_context_compacted"},
		{"a dispatch shows nothing more", &event.ToolDispatched{Header: header(event.TypeToolDispatched, 1)}, ""},
	} {
		var parts []string
		for _, e := range fold(tc.ev) {
			p := e.Type
			switch {
			case e.StopReason != nil:
				p += ":" + e.StopReason.Type
			case e.Error != nil:
				p += ":" + e.Error.Type
			}
			parts = append(parts, p)
		}
		if got := strings.Join(parts, " "); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestCursor(t *testing.T) {
	t.Parallel()
	c := Cursor{Seq: 42, N: 3}
	got, err := ParseCursor(c.String())
	if err != nil || got != c {
		t.Errorf("ParseCursor(%q) = %v, %v", c.String(), got, err)
	}
	for _, bad := range []string{"", "42", "0-1", "x-1", "1--1", "sevt_1"} {
		if _, err := ParseCursor(bad); err == nil {
			t.Errorf("ParseCursor(%q) = nil error", bad)
		}
	}
	id := uuid.New()
	if got, err := ParseToolUseID(ToolUseID(id)); err != nil || got != id {
		t.Errorf("ParseToolUseID: %v %v", got, err)
	}
	if _, err := ParseToolUseID("toolu_x"); err == nil {
		t.Errorf("ParseToolUseID(toolu_x) = nil error")
	}
	if got := string(object(json.RawMessage(`"a string"`))); got != `{"input":"\"a string\""}` {
		t.Errorf("object of a string: %s", got)
	}
}
