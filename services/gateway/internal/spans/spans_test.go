package spans

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/resource"
	"go.opentelemetry.io/otel/trace"

	"corral.dev/pkg/event"
	"corral.dev/pkg/model"
)

// sessionLog is a session's log of two runs: the first answers after two
// calls (one run, one refused) and a compaction, the second fails.
func sessionLog(session uuid.UUID) (evs []event.Event, at func(int) time.Time, calls [2]uuid.UUID) {
	t0 := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	at = func(i int) time.Time { return t0.Add(time.Duration(i) * time.Second) }
	h := func(typ string, i int) event.Header {
		return event.Header{Type: typ, ID: uuid.Must(uuid.NewV7()), Time: at(i), Tenant: "acme", Session: session}
	}
	calls = [2]uuid.UUID{uuid.New(), uuid.New()}
	exit := 1
	evs = []event.Event{
		&event.SessionRequested{Header: h(event.TypeSessionRequested, 0), Request: uuid.New(), User: "ada", Model: "openai:gpt-test", Prompt: "go"},
		&event.ModelResponded{Header: h(event.TypeModelResponded, 1), Turn: 1, Model: "openai:gpt-test", StopReason: "tool_use",
			Usage:   model.Usage{InputTokens: 100, OutputTokens: 10, CacheReadTokens: 60, CacheWriteTokens: 30},
			Content: []model.Block{{Type: model.ToolUseBlock, ID: "toolu_1", Name: "Bash", Input: json.RawMessage(`{"command":"ls"}`)}},
			Calls:   []event.Call{{ID: calls[0], ToolUseID: "toolu_1", Name: "Bash"}}},
		&event.ToolDispatched{Header: h(event.TypeToolDispatched, 2), Call: calls[0], Turn: 1, Name: "Bash", Service: "sandbox"},
		&event.ToolCompleted{Header: h(event.TypeToolCompleted, 4), Call: calls[0], Name: "Bash", Output: "a\n", Service: "sandbox"},
		&event.ModelResponded{Header: h(event.TypeModelResponded, 5), Turn: 2, Model: "openai:gpt-test", StopReason: "tool_use",
			Usage: model.Usage{InputTokens: 200, OutputTokens: 20},
			Calls: []event.Call{{ID: calls[1], ToolUseID: "toolu_2", Name: "Bash"}}},
		// Denied by a reviewer: the harness answers it, nothing ran.
		&event.ToolCompleted{Header: h(event.TypeToolCompleted, 7), Call: calls[1], Name: "Bash", Output: "denied", IsError: true, ExitCode: &exit},
		&event.ContextCompacted{Header: h(event.TypeContextCompacted, 8), Turn: 2, Model: "openai:gpt-small", Usage: model.Usage{InputTokens: 50, OutputTokens: 5}, Summary: "s"},
		&event.ModelResponded{Header: h(event.TypeModelResponded, 9), Turn: 3, Model: "openai:gpt-test", StopReason: "end_turn", Usage: model.Usage{InputTokens: 300, OutputTokens: 30}},
		&event.SessionCompleted{Header: h(event.TypeSessionCompleted, 10), Answer: "done", Turns: 3},
		&event.SessionRequested{Header: h(event.TypeSessionRequested, 20), Request: uuid.New(), User: "ada", Model: "anthropic:claude-x", Prompt: "again"},
		&event.SessionFailed{Header: h(event.TypeSessionFailed, 21), Code: event.CodeModelError, Reason: "the provider answered 400"},
	}
	return evs, at, calls
}

func fold(evs []event.Event) []Span {
	tr := New("acme", evs[0].Head().Session)
	var out []Span
	for _, ev := range evs {
		out = append(out, tr.Fold(ev)...)
	}
	return out
}

func attr(s Span, key attribute.Key) attribute.Value {
	for _, kv := range s.Attrs {
		if kv.Key == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// TestSpansOfASession folds a session's log: each model response is a
// chat span and each call an execute_tool span, children of their run's
// invoke_agent span, timed by the events and with the conventions'
// attributes; folding the log again makes the same spans.
func TestSpansOfASession(t *testing.T) {
	session := uuid.Must(uuid.NewV7())
	evs, at, calls := sessionLog(session)
	got := fold(evs)
	var names []string
	for _, s := range got {
		names = append(names, s.Name)
	}
	want := []string{"chat gpt-test", "execute_tool Bash", "chat gpt-test", "execute_tool Bash", "chat gpt-small", "chat gpt-test", "invoke_agent", "invoke_agent"}
	if !slices.Equal(names, want) {
		t.Fatalf("spans %q, want %q", names, want)
	}
	chat1, tool1, _, denied, summary, chat3, run1, run2 := got[0], got[1], got[2], got[3], got[4], got[5], got[6], got[7]

	for i, s := range got {
		if s.TraceID != trace.TraceID(session) {
			t.Errorf("span %d: trace %s, want the session's ID", i, s.TraceID)
		}
		if attr(s, "gen_ai.conversation.id").AsString() != session.String() || attr(s, AttrTenant).AsString() != "acme" || attr(s, AttrUser).AsString() != "ada" {
			t.Errorf("span %d (%s): attributes %v, want the session, tenant and user", i, s.Name, s.Attrs)
		}
		if i < 6 && s.Parent != run1.ID {
			t.Errorf("span %d (%s): parent %s, want the first run's %s", i, s.Name, s.Parent, run1.ID)
		}
	}
	if run1.Parent.IsValid() || run2.Parent.IsValid() || run1.ID == run2.ID {
		t.Errorf("runs %s (parent %s) and %s (parent %s): want two roots", run1.ID, run1.Parent, run2.ID, run2.Parent)
	}

	// Times are the events'.
	for _, c := range []struct {
		name       string
		s          Span
		start, end int
	}{{"first chat", chat1, 0, 1}, {"first call", tool1, 2, 4}, {"denied call", denied, 7, 7}, {"summary", summary, 7, 8}, {"last chat", chat3, 8, 9}, {"first run", run1, 0, 10}, {"second run", run2, 20, 21}} {
		if !c.s.Start.Equal(at(c.start)) || !c.s.End.Equal(at(c.end)) {
			t.Errorf("%s: %s to %s, want %s to %s", c.name, c.s.Start, c.s.End, at(c.start), at(c.end))
		}
	}

	if chat1.SpanKind != trace.SpanKindClient || attr(chat1, "gen_ai.operation.name").AsString() != "chat" ||
		attr(chat1, "gen_ai.provider.name").AsString() != "openai" || attr(chat1, "gen_ai.request.model").AsString() != "gpt-test" ||
		attr(chat1, "gen_ai.response.model").AsString() != "gpt-test" ||
		attr(chat1, "gen_ai.usage.input_tokens").AsInt64() != 100 || attr(chat1, "gen_ai.usage.output_tokens").AsInt64() != 10 ||
		attr(chat1, "gen_ai.usage.cache_read.input_tokens").AsInt64() != 60 || attr(chat1, "gen_ai.usage.cache_creation.input_tokens").AsInt64() != 30 ||
		!slices.Equal(attr(chat1, "gen_ai.response.finish_reasons").AsStringSlice(), []string{"tool_use"}) {
		t.Errorf("first chat: kind %s, attributes %v", chat1.SpanKind, chat1.Attrs)
	}
	if !attr(summary, AttrCompaction).AsBool() {
		t.Errorf("summary: %v, want it marked a compaction's", summary.Attrs)
	}
	if tool1.SpanKind != trace.SpanKindInternal || attr(tool1, "gen_ai.operation.name").AsString() != "execute_tool" ||
		attr(tool1, "gen_ai.tool.name").AsString() != "Bash" || attr(tool1, "gen_ai.tool.call.id").AsString() != "toolu_1" ||
		attr(tool1, "gen_ai.tool.type").AsString() != "extension" || attr(tool1, AttrCall).AsString() != calls[0].String() ||
		attr(tool1, AttrService).AsString() != "sandbox" || tool1.Status != codes.Unset {
		t.Errorf("first call: kind %s, status %s, attributes %v", tool1.SpanKind, tool1.Status, tool1.Attrs)
	}
	if denied.Status != codes.Error || attr(denied, "error.type").AsString() != "exit_code" || attr(denied, "gen_ai.tool.call.id").AsString() != "toolu_2" {
		t.Errorf("denied call: status %s %q, attributes %v", denied.Status, denied.Description, denied.Attrs)
	}
	if attr(run1, "gen_ai.operation.name").AsString() != "invoke_agent" || attr(run1, "gen_ai.request.model").AsString() != "gpt-test" ||
		attr(run1, "gen_ai.usage.input_tokens").AsInt64() != 650 || attr(run1, "gen_ai.usage.output_tokens").AsInt64() != 65 ||
		attr(run1, AttrOutcome).AsString() != "completed" || run1.Status != codes.Unset {
		t.Errorf("first run: status %s, attributes %v", run1.Status, run1.Attrs)
	}
	if run2.Status != codes.Error || attr(run2, "error.type").AsString() != event.CodeModelError || attr(run2, "gen_ai.provider.name").AsString() != "anthropic" {
		t.Errorf("second run: status %s %q, attributes %v", run2.Status, run2.Description, run2.Attrs)
	}

	// The same log folded again (by a reader after a restart) makes the
	// same spans, IDs included.
	again := fold(evs)
	for i := range got {
		if got[i].ID != again[i].ID || got[i].Parent != again[i].Parent {
			t.Errorf("span %d: %s (parent %s) the first time, %s (parent %s) the second", i, got[i].ID, got[i].Parent, again[i].ID, again[i].Parent)
		}
	}
	ids := map[trace.SpanID]bool{}
	for _, s := range got {
		ids[s.ID] = true
	}
	if len(ids) != len(got) {
		t.Errorf("%d span IDs for %d spans", len(ids), len(got))
	}
}

// TestSpansFollowUpJoinsTheRun: a follow-up recorded while a run is under
// way is part of it, and a run paused over a budget ends; its resumption
// starts another.
func TestSpansFollowUpJoinsTheRun(t *testing.T) {
	session := uuid.Must(uuid.NewV7())
	h := func(typ string) event.Header { return event.NewHeader(typ, "acme", session) }
	got := fold([]event.Event{
		&event.SessionRequested{Header: h(event.TypeSessionRequested), Request: uuid.New(), User: "ada", Model: "openai:m"},
		&event.SessionRequested{Header: h(event.TypeSessionRequested), Request: uuid.New(), User: "ada", Model: "openai:m"},
		&event.ModelResponded{Header: h(event.TypeModelResponded), Turn: 1, Model: "openai:m"},
		&event.SessionPaused{Header: h(event.TypeSessionPaused), Budget: "session.tokens"},
		&event.SessionResumed{Header: h(event.TypeSessionResumed), Raise: uuid.New()},
		&event.ModelResponded{Header: h(event.TypeModelResponded), Turn: 2, Model: "openai:m"},
		&event.SessionCompleted{Header: h(event.TypeSessionCompleted)},
	})
	if len(got) != 4 {
		t.Fatalf("%d spans, want 2 chats and 2 runs", len(got))
	}
	if got[0].Parent != got[1].ID || attr(got[1], AttrOutcome).AsString() != "paused" {
		t.Errorf("first run %+v, chat's parent %s", got[1], got[0].Parent)
	}
	if got[2].Parent != got[3].ID || got[3].ID == got[1].ID || attr(got[3], AttrOutcome).AsString() != "completed" {
		t.Errorf("second run %+v, chat's parent %s", got[3], got[2].Parent)
	}
}

// TestReadOnlyNamesTheAgent: a run's span is named for its agent, and is
// exported with the IDs and times folded.
func TestReadOnlyNamesTheAgent(t *testing.T) {
	session := uuid.Must(uuid.NewV7())
	evs, at, _ := sessionLog(session)
	got := fold(evs)
	run := got[6].ReadOnly(Agent{ID: "agent_1", Name: "fixer"}, resource.Empty())
	if run.Name() != "invoke_agent fixer" || run.SpanContext().TraceID() != trace.TraceID(session) || run.SpanContext().SpanID() != got[6].ID ||
		!run.StartTime().Equal(at(0)) || run.Parent().IsValid() {
		t.Errorf("run: %s %s/%s from %s, parent %v", run.Name(), run.SpanContext().TraceID(), run.SpanContext().SpanID(), run.StartTime(), run.Parent())
	}
	var agent string
	for _, kv := range run.Attributes() {
		if kv.Key == "gen_ai.agent.name" {
			agent = kv.Value.AsString()
		}
	}
	if agent != "fixer" {
		t.Errorf("run attributes %v, want gen_ai.agent.name fixer", run.Attributes())
	}
	chat := got[0].ReadOnly(Agent{Name: "fixer"}, resource.Empty())
	if chat.Name() != "chat gpt-test" || chat.Parent().SpanID() != got[6].ID || !chat.SpanContext().IsSampled() {
		t.Errorf("chat: %s, parent %s", chat.Name(), chat.Parent().SpanID())
	}
}
