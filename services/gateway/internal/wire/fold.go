package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/event"
	"corral.dev/pkg/model"
)

// Cursor is a place in a session's events: the N-th API event (from 0)
// of the log's event at stream sequence Seq. Every API event comes from one
// event of the log, so a cursor names it for good.
type Cursor struct {
	Seq uint64
	N   int
}

// String is the cursor as clients see it (a page's next_page, an SSE
// event's id): opaque to them.
func (c Cursor) String() string { return fmt.Sprintf("%d-%d", c.Seq, c.N) }

// Before reports whether c comes before d.
func (c Cursor) Before(d Cursor) bool { return c.Seq < d.Seq || c.Seq == d.Seq && c.N < d.N }

// ErrCursor is returned by [ParseCursor] for what no cursor prints as.
var ErrCursor = errors.New("not a cursor of this session's events")

// ParseCursor reads a cursor [Cursor.String] printed.
func ParseCursor(s string) (Cursor, error) {
	a, b, ok := strings.Cut(s, "-")
	seq, err1 := strconv.ParseUint(a, 10, 64)
	n, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || n < 0 || seq == 0 {
		return Cursor{}, fmt.Errorf("%w: %q", ErrCursor, s)
	}
	return Cursor{Seq: seq, N: n}, nil
}

// Folder turns a session's log into the API's events, one event of the
// log at a time, in the log's order: it remembers what the events after
// depend on (the calls waiting for a reviewer, when the last event was).
// The zero value is ready for a log's first event.
type Folder struct {
	held map[uuid.UUID]bool
	last time.Time
}

// Clone returns a copy of f that shares nothing mutable with it: a
// reader that goes on from where f is, while f goes on elsewhere.
func (f *Folder) Clone() Folder {
	return Folder{held: maps.Clone(f.held), last: f.last}
}

// ID is the API event ID of the n-th API event made of the log's event id.
func ID(id uuid.UUID, n int) string {
	return fmt.Sprintf("sevt_%s_%d", strings.ReplaceAll(id.String(), "-", ""), n)
}

// BlockID is the ID of the API event made of block index of the response
// to turn of session: an agent.message or an agent.thinking. It is known
// before the response is recorded (the turn is unique in its session's
// log), so that a preview of the event as the model writes it (an SSE
// event_start) names the event that ends it.
func BlockID(session uuid.UUID, turn, index int) string {
	return ID(uuid.NewSHA1(session, fmt.Appendf(nil, "turn:%d", turn)), index)
}

// ToolUseID is the ID of the agent.tool_use event of call: its results
// and confirmations name it.
func ToolUseID(call uuid.UUID) string { return "toolu_" + strings.ReplaceAll(call.String(), "-", "") }

// ParseToolUseID returns the call a [ToolUseID] names.
func ParseToolUseID(s string) (uuid.UUID, error) {
	hex, ok := strings.CutPrefix(s, "toolu_")
	id, err := uuid.Parse(hex)
	if !ok || err != nil || len(hex) != 32 {
		return uuid.Nil, fmt.Errorf("tool_use_id %q names no agent.tool_use event of this API", s)
	}
	return id, nil
}

// Fold returns the API events ev, recorded at stream sequence seq, makes.
// ev must be one the session log accepted, after those folded before it.
func (f *Folder) Fold(seq uint64, ev event.Event) []Event {
	h := ev.Head()
	at, before := h.Time, f.last
	if before.IsZero() || before.After(at) {
		before = at
	}
	f.last = at
	var out []Event
	add := func(e Event, processed time.Time) {
		e.Cursor = Cursor{Seq: seq, N: len(out)}
		if e.ID == "" {
			e.ID = ID(h.ID, len(out))
		}
		e.ProcessedAt = &processed
		out = append(out, e)
	}
	switch ev := ev.(type) {
	case *event.SessionRequested:
		f.held = nil
		// Its ID is the request's, as the gateway answered the message
		// that made it.
		add(Event{ID: ID(ev.Request, 0), Type: "user.message", Content: []Block{Text(ev.Prompt)}}, at)
		add(Event{Type: "session.status_running"}, at)
	case *event.ModelResponded:
		start := ID(h.ID, 0)
		add(Event{Type: "span.model_request_start"}, before)
		blockID := func(i int) string {
			if ev.Turn < 1 {
				return "" // numbered after the response's event
			}
			return BlockID(h.Session, ev.Turn, i)
		}
		for i, b := range ev.Content {
			switch b.Type {
			case model.ThinkingBlock, model.RedactedThinkingBlock:
				add(Event{ID: blockID(i), Type: "agent.thinking"}, at)
			case model.TextBlock:
				if strings.TrimSpace(b.Text) != "" {
					add(Event{ID: blockID(i), Type: "agent.message", Content: []Block{Text(b.Text)}}, at)
				}
			}
		}
		for _, c := range ev.Calls {
			add(Event{ID: ToolUseID(c.ID), Type: "agent.tool_use", Name: c.Name, Input: object(ev.Input(c))}, at)
		}
		u := ev.Usage
		add(Event{Type: "span.model_request_end", ModelRequestStartID: start, IsError: new(false), ModelUsage: &ModelUsage{
			InputTokens: u.InputTokens - u.CacheReadTokens - u.CacheWriteTokens, OutputTokens: u.OutputTokens,
			CacheReadInputTokens: u.CacheReadTokens, CacheCreationInputTokens: u.CacheWriteTokens,
		}}, at)
	case *event.ToolCompleted:
		if ev.Name == event.PrepareTool {
			break // preparing the workspace is no call the model made
		}
		add(Event{Type: "agent.tool_result", ToolUseID: ToolUseID(ev.Call), Content: []Block{Text(ev.Output)}, IsError: new(ev.IsError)}, at)
	case *event.ApprovalRequested:
		if f.held == nil {
			f.held = make(map[uuid.UUID]bool)
		}
		f.held[ev.Call] = true
		add(Event{Type: "session.status_idle", StopReason: &StopReason{Type: "requires_action", EventIDs: []string{ToolUseID(ev.Call)}}}, at)
	case *event.ApprovalDecided:
		if f.held[ev.Call] {
			delete(f.held, ev.Call)
			if len(f.held) == 0 {
				add(Event{Type: "session.status_running"}, at)
			}
		}
	case *event.SessionCompleted:
		f.held = nil
		add(Event{Type: "session.status_idle", StopReason: &StopReason{Type: "end_turn"}}, at)
	case *event.SessionStopped:
		f.held = nil
		add(Event{Type: "session.status_idle", StopReason: &StopReason{Type: "end_turn"}}, at)
	case *event.SessionPaused:
		add(Event{Type: "session.status_idle", StopReason: &StopReason{Type: "budget_reached"}}, at)
	case *event.SessionResumed:
		add(Event{Type: "session.status_running"}, at)
	case *event.ContextCompacted:
		add(Event{Type: "agent.thread_context_compacted"}, at)
	case *event.SessionFailed:
		f.held = nil
		if ev.Code == event.CodeBudget {
			add(Event{Type: "session.status_idle", StopReason: &StopReason{Type: "budget_reached"}}, at)
			break
		}
		add(Event{Type: "session.error", Error: &EventError{Type: errorType(ev.Code), Message: ev.Reason, RetryStatus: RetryStatus{Type: "terminal"}}}, at)
		add(Event{Type: "session.status_terminated"}, at)
	}
	return out
}

// errorType is the session.error type of a failure's code.
func errorType(code string) string {
	switch code {
	case event.CodeModelError, event.CodeUnknownModel, event.CodeNotConfigured:
		return "model_request_failed_error"
	case event.CodeWorkspace:
		return "repository_clone_error"
	}
	return "unknown_error"
}

// object returns a call's input as the API's tool_use input, a JSON
// object: a model's input that is none (it was refused as invalid) is
// kept whole under "input".
func object(input json.RawMessage) json.RawMessage {
	var probe map[string]json.RawMessage
	if json.Unmarshal(input, &probe) == nil && probe != nil {
		return input
	}
	b, _ := json.Marshal(map[string]string{"input": string(input)})
	return b
}
