package spans

import (
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
)

// Agent is the agent a session runs, as the HTTP API knows it: one the
// API made, or "corral" for a session started elsewhere.
type Agent struct {
	ID, Name string
}

// Scope is the instrumentation scope of every span.
var Scope = instrumentation.Scope{Name: "corral.dev/services/gateway", SchemaURL: semconv.SchemaURL}

// ReadOnly returns s as the SDK's exporters take it, from res, a run's
// span named for agent. A [sdktrace.ReadOnlySpan] cannot be made outside
// the SDK but by a live span, which would be timed by the clock and
// given random IDs, or by a stub's snapshot, which keeps the log's.
func (s Span) ReadOnly(agent Agent, res *resource.Resource) sdktrace.ReadOnlySpan {
	attrs := s.Attrs
	name := s.Name
	if s.Kind == Run && agent.Name != "" {
		name += " " + agent.Name
		attrs = append(attrs[:len(attrs):len(attrs)], semconv.GenAIAgentName(agent.Name), semconv.GenAIAgentID(agent.ID))
	}
	sc := func(id trace.SpanID) trace.SpanContext {
		return trace.NewSpanContext(trace.SpanContextConfig{TraceID: s.TraceID, SpanID: id, TraceFlags: trace.FlagsSampled})
	}
	stub := tracetest.SpanStub{
		Name:                 name,
		SpanContext:          sc(s.ID),
		SpanKind:             s.SpanKind,
		StartTime:            s.Start,
		EndTime:              s.End,
		Attributes:           attrs,
		Status:               sdktrace.Status{Code: s.Status, Description: s.Description},
		Resource:             res,
		InstrumentationScope: Scope,
	}
	if s.Parent.IsValid() {
		stub.Parent = sc(s.Parent)
	}
	return stub.Snapshot()
}
