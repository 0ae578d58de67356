package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path"
	"regexp"
	"sync"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/sessionlog"
	"corral.dev/services/gateway/internal/spans"
)

// tracesEndpoint returns the URL spans are sent to, as the OTLP exporter
// reads it from getenv: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it is, or
// else OTEL_EXPORTER_OTLP_ENDPOINT with /v1/traces after its path; ""
// when neither is set, or OTEL_SDK_DISABLED or OTEL_TRACES_EXPORTER=none
// says not to export. Only OTLP over HTTP is spoken.
func tracesEndpoint(getenv func(string) string) (string, error) {
	if getenv("OTEL_SDK_DISABLED") == "true" {
		return "", nil
	}
	switch e := getenv("OTEL_TRACES_EXPORTER"); e {
	case "none":
		return "", nil
	case "", "otlp":
	default:
		return "", fmt.Errorf("OTEL_TRACES_EXPORTER=%q: Corral exports traces over OTLP alone (otlp, or none)", e)
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := getenv(name); p != "" && p != "http/protobuf" && p != "http/json" {
			return "", fmt.Errorf("%s=%q: Corral exports traces over OTLP/HTTP (http/protobuf or http/json); point the endpoint at the collector's HTTP receiver (port 4318)", name, p)
		}
	}
	name, raw := "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if raw == "" {
		name, raw = "OTEL_EXPORTER_OTLP_ENDPOINT", getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	if raw == "" {
		return "", nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%s: want an http or https URL (http://collector:4318), not %s", name, redactURL(raw))
	}
	if name == "OTEL_EXPORTER_OTLP_ENDPOINT" {
		u.Path = path.Join("/", u.Path, "v1/traces")
	}
	return u.String(), nil
}

// tracer exports the spans of every session's log (see package spans).
type tracer struct {
	exporter sdktrace.SpanExporter
	res      *resource.Resource
	// traces are the sessions' traces as far as their spans were
	// exported: a session's entry has every span its log ends up to
	// its seq exported. A session not here is read from its start.
	traces *lru.Cache[string, *sessionTrace]

	mu       sync.Mutex
	consumer jetstream.Consumer
}

// sessionTrace is one session's log folded up to seq.
type sessionTrace struct {
	sess  *sessionlog.Session
	trace *spans.Trace
	seq   uint64
	// agent is the session's agent, once looked up.
	agent *spans.Agent
}

// maxTraces bounds the sessions whose traces are kept between events.
const maxTraces = 1024

// newTracer returns the exporter of spans to endpoint. The OTLP
// exporter's other settings (OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT,
// _COMPRESSION, certificates) and the resource's (OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES) are read from the process environment, as the
// SDK reads them. The exporter retries nothing itself: a failed export is
// redelivered by the consumer, with its backoff.
func newTracer(ctx context.Context, endpoint string) (*tracer, error) {
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint),
		otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false}))
	if err != nil {
		return nil, fmt.Errorf("traces to %s: %w", redactURL(endpoint), err)
	}
	res, err := resource.New(ctx, resource.WithAttributes(semconv.ServiceName("corral")), resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("traces: OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	cache, err := lru.New[string, *sessionTrace](maxTraces)
	if err != nil {
		return nil, err
	}
	return &tracer{exporter: exp, res: res, traces: cache}, nil
}

// exportTraces exports the spans of every session's log until ctx is
// done: a durable consumer of every session event, each session's handled
// one at a time. An event is read with every event of its session stored
// after the last one whose spans were exported, and acknowledged once
// the spans those end are: so none is lost to a crash, and a span
// exported twice is the same span (its IDs are the log's). A failed
// export is retried, with the consumer's backoff, for as long as it
// fails: it holds up no other session, and gives up on none.
func (s *Service) exportTraces(ctx context.Context) error {
	s.log.InfoContext(ctx, "exporting traces", "endpoint", redactURL(s.cfg.TracesEndpoint))
	defer func() {
		sctx, cancel := bus.Bound(context.WithoutCancel(ctx))
		defer cancel()
		if err := s.tracer.exporter.Shutdown(sctx); err != nil {
			s.log.WarnContext(ctx, "traces exporter shutdown", "err", err)
		}
	}()
	return bus.Consume(ctx, s.js, bus.Consumer{
		Stream: bus.StreamEvents,
		Config: jetstream.ConsumerConfig{
			Durable:       bus.ConsumerGatewayTraces,
			FilterSubject: "events.>",
			// Traces begin with the events stored once they are
			// asked for, not with the whole of the stream's past.
			DeliverPolicy: jetstream.DeliverNewPolicy,
			// Never given up: an export fails while the collector is
			// away, and the spans wait for it.
			MaxDeliver: -1,
		},
		Concurrency: s.cfg.Concurrency,
		Admit: func(m bus.Msg) (string, string) {
			tenant, session, err := bus.ParseSubject(m.Subject)
			if err != nil {
				return m.Subject, ""
			}
			return bus.SessionKey(tenant, session), tenant
		},
		Handler: s.exportSpans,
		Logger:  s.log.With("consumer", bus.ConsumerGatewayTraces),
	})
}

// exportSpans exports the spans that m's session's log ends up to its
// last event, from after those already exported.
func (s *Service) exportSpans(ctx context.Context, m bus.Msg) error {
	a, err := sessionlog.ParseSubject(m.Subject)
	if err != nil {
		_, err = s.logs.Judge(ctx, m) // rejected: dead-lettered with its reason
		return err
	}
	t := s.tracer
	key := bus.SessionKey(a.Tenant, a.Session)
	st, ok := t.traces.Get(key)
	if ok && st.seq >= m.StreamSeq {
		return nil // exported with an event before it
	}
	// What is folded here is kept only once its spans are exported.
	t.traces.Remove(key)
	// A session read from its start: the spans its events up to the
	// consumer's ack floor end were exported before they were
	// acknowledged.
	var exported uint64
	if !ok {
		if exported, err = t.ackFloor(ctx, s.js); err != nil {
			return err
		}
		st = &sessionTrace{sess: sessionlog.NewSession(a.Tenant, a.Session), trace: spans.New(a.Tenant, a.Session)}
	}
	entries, err := s.logs.Read(ctx, st.sess, st.seq)
	if err != nil {
		return err
	}
	var out []spans.Span
	for _, en := range entries {
		ended := st.trace.Fold(en.Event)
		if en.Seq > exported {
			out = append(out, ended...)
		}
		st.seq = max(st.seq, en.Seq)
	}
	if len(out) > 0 {
		if err := s.sendSpans(ctx, a.Tenant, a.Session.String(), st, out); err != nil {
			return err
		}
	}
	st.seq = max(st.seq, m.StreamSeq)
	t.traces.Add(key, st)
	return nil
}

// sendSpans exports out, spans of st's session, in one request.
func (s *Service) sendSpans(ctx context.Context, tenant, session string, st *sessionTrace, out []spans.Span) error {
	agent := spans.Agent{}
	if st.agent != nil {
		agent = *st.agent
	} else if user := st.trace.User(); user != "" {
		a, err := s.traceAgent(ctx, tenant, user, session)
		if err != nil {
			return err
		}
		st.agent, agent = &a, a
	}
	ro := make([]sdktrace.ReadOnlySpan, len(out))
	for i, sp := range out {
		ro[i] = sp.ReadOnly(agent, s.tracer.res)
	}
	if err := s.tracer.exporter.ExportSpans(ctx, ro); err != nil {
		return fmt.Errorf("export %d spans of session %s: %w", len(ro), session, redactEndpoint(err))
	}
	return nil
}

// redactEndpoint is err, an exporter's, with every URL in its text shown
// as [redactURL] shows it: the exporter's errors name the collector's URL
// whole (its path, its user information), and a failed export is logged
// at each retry.
func redactEndpoint(err error) error {
	return &redactedError{err: err, text: urlInText.ReplaceAllStringFunc(err.Error(), redactURL)}
}

// urlInText matches a URL in an error's text: up to a space or a quote.
var urlInText = regexp.MustCompile(`(?i)\bhttps?://[^\s"'<>]+`)

// redactedError is an error whose text was redacted.
type redactedError struct {
	err  error
	text string
}

func (e *redactedError) Error() string { return e.text }
func (e *redactedError) Unwrap() error { return e.err }

// traceAgent returns the agent of a session of user: the one its record
// in the HTTP API names, under the user's own key, or "corral" for a
// session started elsewhere, as the API shows it.
func (s *Service) traceAgent(ctx context.Context, tenant, user, session string) (spans.Agent, error) {
	var rec sessionRecord
	_, err := readRecord(ctx, s.js, sessionKey(tenant, bus.UserToken(user), session), &rec)
	switch {
	case errors.Is(err, errNoRecord):
		return spans.Agent{ID: "corral", Name: "corral"}, nil
	case err != nil:
		return spans.Agent{}, err
	}
	return spans.Agent{ID: rec.Agent.ID, Name: rec.Agent.Name}, nil
}

// ackFloor returns the stream sequence up to which the consumer has
// acknowledged every event.
func (t *tracer) ackFloor(ctx context.Context, js jetstream.JetStream) (uint64, error) {
	ctx, cancel := bus.Bound(ctx)
	defer cancel()
	t.mu.Lock()
	cons := t.consumer
	t.mu.Unlock()
	if cons == nil {
		c, err := js.Consumer(ctx, bus.StreamEvents, bus.ConsumerGatewayTraces)
		if err != nil {
			return 0, fmt.Errorf("look up consumer %s: %w", bus.ConsumerGatewayTraces, err)
		}
		t.mu.Lock()
		t.consumer, cons = c, c
		t.mu.Unlock()
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("read consumer %s: %w", bus.ConsumerGatewayTraces, err)
	}
	return info.AckFloor.Stream, nil
}
