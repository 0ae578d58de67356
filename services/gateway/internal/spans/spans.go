// Package spans derives OpenTelemetry spans from a session's log, by the
// GenAI semantic conventions: an invoke_agent span for each run of the
// agent (from the request that set it going to the event that let it
// rest), a chat span for each model response and an execute_tool span for
// each tool call, both children of their run's.
//
// Every time is an event's own, never the reader's clock, and every ID is
// derived from the log: a session's trace ID is its session ID, a span's
// ID a hash of the ID of the event or call it stands for. A reader that
// folds the same log again makes the same spans, so a span exported twice
// (after a redelivery, say) is the same span twice, never two.
//
// Folding is pure: [Trace.Fold] takes the session's accepted events in
// order and returns the spans each one ends, with nothing read or sent.
package spans

import (
	"crypto/sha256"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"corral.dev/pkg/event"
	"corral.dev/pkg/model"
)

// Attributes of Corral's own, beside the conventions' gen_ai.* ones.
const (
	AttrTenant = attribute.Key("corral.tenant")
	AttrUser   = attribute.Key("corral.user")
	// AttrTurn is a model response's turn in its session, from 1.
	AttrTurn = attribute.Key("corral.turn")
	// AttrCall is Corral's ID of a tool call (gen_ai.tool.call.id is the
	// model's).
	AttrCall = attribute.Key("corral.call.id")
	// AttrService is the tool service that ran a call ("sandbox",
	// "memory"); absent for a call the harness refused.
	AttrService = attribute.Key("corral.tool.service")
	// AttrOutcome is how a run ended: completed, failed, stopped or
	// paused (over a budget, until a raise or a follow-up).
	AttrOutcome = attribute.Key("corral.outcome")
	// AttrCompaction marks the chat span of a summary the harness asked
	// the model for to make a session's context smaller.
	AttrCompaction = attribute.Key("corral.compaction")
)

// toolType is every call's gen_ai.tool.type: Corral's tools run on the
// agent's side (in the session's sandbox, or its memory service), never
// in the API client's code.
const toolType = "extension"

// Kind says what a [Span] stands for.
type Kind int

// The kinds of span.
const (
	Run Kind = iota
	Chat
	Tool
)

// Span is a span an event ended.
type Span struct {
	Kind        Kind
	Name        string
	TraceID     trace.TraceID
	ID          trace.SpanID
	Parent      trace.SpanID // invalid for a run's span, which is a root
	SpanKind    trace.SpanKind
	Start, End  time.Time
	Attrs       []attribute.KeyValue
	Status      codes.Code
	Description string
}

// Trace is what a session's log says so far that spans still to come need:
// the run under way, and the calls not answered yet.
type Trace struct {
	tenant  string
	session uuid.UUID
	// user and model are the session's, as its last request said.
	user, model string
	// last is the time of the last event folded: when the model was
	// asked for the response that comes next.
	last  time.Time
	run   *run
	calls map[uuid.UUID]*call
}

// run is an agent run under way.
type run struct {
	id    trace.SpanID
	start time.Time
	model string
	turns int
	usage model.Usage
}

// call is a tool call of a recorded response, not answered yet.
type call struct {
	name, toolUseID string
	// start is when it was dispatched (dispatched set), or else when
	// the response that made it was recorded.
	start      time.Time
	dispatched bool
	run        trace.SpanID
}

// New returns the trace of a session whose log was not folded yet.
func New(tenant string, session uuid.UUID) *Trace {
	return &Trace{tenant: tenant, session: session, calls: make(map[uuid.UUID]*call)}
}

// User is the session's user, as its last request said; "" before one.
func (t *Trace) User() string { return t.user }

// Fold folds ev, the session's next accepted event, and returns the spans
// it ends.
func (t *Trace) Fold(ev event.Event) []Span {
	h := ev.Head()
	defer func() { t.last = h.Time }()
	switch e := ev.(type) {
	case *event.SessionRequested:
		t.user, t.model = e.User, e.Model
		// A follow-up that lands while a run is under way joins it.
		t.begin(h)
	case *event.SessionResumed:
		t.begin(h)
	case *event.ModelResponded:
		return []Span{t.respond(h, e)}
	case *event.ContextCompacted:
		if e.Model == "" {
			return nil // no summary: the model was not asked
		}
		s := t.chat(spanID("compaction", h.ID), h.Time, e.Model, e.Usage, "")
		s.Attrs = append(s.Attrs, AttrCompaction.Bool(true))
		t.count(e.Usage, false)
		return []Span{s}
	case *event.ToolDispatched:
		if c := t.calls[e.Call]; c != nil {
			c.start, c.dispatched = h.Time, true
		}
	case *event.ToolCompleted:
		if s, ok := t.complete(h, e); ok {
			return []Span{s}
		}
	case *event.SessionCompleted:
		return t.end(h, "completed", codes.Unset, "", "")
	case *event.SessionStopped:
		return t.end(h, "stopped", codes.Unset, "", "")
	case *event.SessionPaused:
		return t.end(h, "paused", codes.Unset, "", "")
	case *event.SessionFailed:
		if t.run == nil {
			// A request refused before it was recorded (an unknown
			// model, say): a run that ended as it began.
			t.run = &run{id: spanID("run", h.ID), start: h.Time, model: t.model}
		}
		return t.end(h, "failed", codes.Error, e.Code, e.Reason)
	}
	return nil
}

// begin starts a run at h, unless one is under way.
func (t *Trace) begin(h *event.Header) {
	if t.run == nil {
		t.run = &run{id: spanID("run", h.ID), start: h.Time, model: t.model}
	}
}

// respond returns the chat span of a response, and keeps its calls.
func (t *Trace) respond(h *event.Header, e *event.ModelResponded) Span {
	s := t.chat(spanID("chat", h.ID), h.Time, e.Model, e.Usage, e.StopReason)
	s.Attrs = append(s.Attrs, AttrTurn.Int(e.Turn))
	for _, c := range e.Calls {
		t.calls[c.ID] = &call{name: c.Name, toolUseID: c.ToolUseID, start: h.Time, run: s.Parent}
	}
	// Responses of earlier versions dispatched their calls themselves.
	for _, d := range e.Dispatches() {
		t.calls[d.Call].dispatched = true
	}
	t.count(e.Usage, true)
	return s
}

// count adds a model call's usage to the run under way.
func (t *Trace) count(u model.Usage, turn bool) {
	if t.run == nil {
		return
	}
	t.run.usage.Add(u)
	if turn {
		t.run.turns++
	}
}

// chat returns the span of a model call recorded at end, which started
// when the event before it was.
func (t *Trace) chat(id trace.SpanID, end time.Time, modelName string, u model.Usage, stop string) Span {
	provider, name := split(modelName)
	s := t.span(Chat, "chat "+name, id, t.start(end), end)
	if t.run != nil {
		s.Parent = t.run.id
	}
	s.SpanKind = trace.SpanKindClient
	s.Attrs = append(s.Attrs,
		semconv.GenAIOperationNameChat,
		semconv.GenAIProviderNameKey.String(provider),
		semconv.GenAIRequestModel(name),
		semconv.GenAIResponseModel(name),
		semconv.GenAIUsageInputTokens(u.InputTokens),
		semconv.GenAIUsageOutputTokens(u.OutputTokens),
	)
	if u.CacheReadTokens > 0 {
		s.Attrs = append(s.Attrs, semconv.GenAIUsageCacheReadInputTokens(u.CacheReadTokens))
	}
	if u.CacheWriteTokens > 0 {
		s.Attrs = append(s.Attrs, semconv.GenAIUsageCacheCreationInputTokens(u.CacheWriteTokens))
	}
	if stop != "" {
		s.Attrs = append(s.Attrs, semconv.GenAIResponseFinishReasons(stop))
	}
	return s
}

// complete returns the execute_tool span of a call's result; false for a
// result of no call a response made (the call that prepares the
// workspace, which the model did not ask for).
func (t *Trace) complete(h *event.Header, e *event.ToolCompleted) (Span, bool) {
	c := t.calls[e.Call]
	if c == nil {
		return Span{}, false
	}
	delete(t.calls, e.Call)
	start := h.Time // refused, or denied by a reviewer: nothing ran
	if c.dispatched {
		start = earliest(c.start, h.Time)
	}
	s := t.span(Tool, "execute_tool "+c.name, spanID("tool", e.Call), start, h.Time)
	s.Parent = c.run
	s.SpanKind = trace.SpanKindInternal
	s.Attrs = append(s.Attrs,
		semconv.GenAIOperationNameExecuteTool,
		semconv.GenAIToolName(c.name),
		semconv.GenAIToolCallID(c.toolUseID),
		semconv.GenAIToolType(toolType),
		AttrCall.String(e.Call.String()),
	)
	if e.Service != "" {
		s.Attrs = append(s.Attrs, AttrService.String(e.Service))
	}
	if e.IsError {
		s.Status = codes.Error
		switch {
		case e.TimedOut:
			s.Attrs = append(s.Attrs, semconv.ErrorTypeKey.String("timeout"))
			s.Description = "the call timed out"
		case e.ExitCode != nil:
			s.Attrs = append(s.Attrs, semconv.ErrorTypeKey.String("exit_code"))
			s.Description = "the command exited " + strconv.Itoa(*e.ExitCode)
		default:
			s.Attrs = append(s.Attrs, semconv.ErrorTypeKey.String("tool_error"))
			s.Description = "the call failed"
		}
	}
	return s, true
}

// end ends the run under way at h, if there is one.
func (t *Trace) end(h *event.Header, outcome string, status codes.Code, errType, why string) []Span {
	r := t.run
	if r == nil {
		return nil
	}
	t.run = nil
	provider, name := split(r.model)
	s := t.span(Run, "invoke_agent", r.id, earliest(r.start, h.Time), h.Time)
	s.SpanKind = trace.SpanKindInternal
	s.Attrs = append(s.Attrs,
		semconv.GenAIOperationNameInvokeAgent,
		semconv.GenAIProviderNameKey.String(provider),
		semconv.GenAIRequestModel(name),
		semconv.GenAIUsageInputTokens(r.usage.InputTokens),
		semconv.GenAIUsageOutputTokens(r.usage.OutputTokens),
		AttrOutcome.String(outcome),
	)
	if status == codes.Error {
		s.Status, s.Description = status, truncate(why, 256)
		s.Attrs = append(s.Attrs, semconv.ErrorTypeKey.String(errType))
	}
	return []Span{s}
}

// span returns a span of the session with the attributes every one has.
func (t *Trace) span(k Kind, name string, id trace.SpanID, start, end time.Time) Span {
	return Span{
		Kind: k, Name: name, TraceID: trace.TraceID(t.session), ID: id, Start: start, End: end,
		Attrs: []attribute.KeyValue{
			semconv.GenAIConversationID(t.session.String()),
			AttrTenant.String(t.tenant),
			AttrUser.String(t.user),
		},
	}
}

// start is when the model was asked for a response recorded at end: when
// the event before it was recorded. Events are stamped by the services
// that write them, whose clocks may disagree a little: a span never
// starts after it ends.
func (t *Trace) start(end time.Time) time.Time {
	if t.last.IsZero() {
		return end
	}
	return earliest(t.last, end)
}

// split returns a model name's provider ("openai", "anthropic", or a
// configured provider's name) and the model's name at it.
func split(modelName string) (provider, name string) {
	provider, name, ok := strings.Cut(modelName, ":")
	if !ok {
		return "_OTHER", modelName
	}
	return provider, name
}

// spanID is the span ID of what id names in the session's log, as kind:
// the same every time the log is read.
func spanID(kind string, id uuid.UUID) trace.SpanID {
	sum := sha256.Sum256(append([]byte(kind+":"), id[:]...))
	var s trace.SpanID
	copy(s[:], sum[:])
	if !s.IsValid() {
		s[7] = 1
	}
	return s
}

// truncate returns s cut to n bytes at most, at a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// earliest returns the earlier of a and b.
func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
