package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/logtest"
	"corral.dev/pkg/model"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/policy"
	"corral.dev/pkg/sessionlog"
	"corral.dev/services/gateway/otlptest"
)

// startTracing runs a gateway exporting spans to rcv, on js, and waits
// for its consumer (which takes the events stored from then on). stop
// ends it.
func startTracing(t *testing.T, js jetstream.JetStream, rcv *otlptest.Receiver) (stop func()) {
	t.Helper()
	ctx := context.Background()
	s, err := New(ctx, Config{Prices: policy.Default(), Concurrency: 4, TracesEndpoint: rcv.URL, Webhooks: WebhookConfig{Key: testWebhookKey}}, js, nil, slog.New(slog.NewTextHandler(&logtest.Buffer{}, nil)))
	if err != nil {
		t.Fatal(err)
	}
	stop = natstest.Serve(t, s.Run)
	natstest.WaitFor(t, 10*time.Second, func() error {
		_, err := js.Consumer(ctx, bus.StreamEvents, bus.ConsumerGatewayTraces)
		return err
	})
	return stop
}

// spansByID returns the spans received, one of each ID, and fails the
// test if two of one ID differ.
func spansByID(t *testing.T, rcv *otlptest.Receiver) map[string]otlptest.Span {
	t.Helper()
	out := map[string]otlptest.Span{}
	for _, s := range rcv.Spans() {
		if prev, ok := out[s.ID]; ok && (prev.Name != s.Name || !prev.Start.Equal(s.Start) || !prev.End.Equal(s.End) || prev.Parent != s.Parent) {
			t.Errorf("span %s exported twice, differently: %+v and %+v", s.ID, prev, s)
		}
		out[s.ID] = s
	}
	return out
}

// TestTracesSurviveRestartsAndAnAbsentCollector records a session as the
// harness and the sandbox-manager do while the gateway exporting its
// spans is stopped between a call's dispatch and its result, and the
// collector refuses the first exports after the restart: every span
// arrives, the call's timed from its dispatch (read back from the log by
// the new gateway), each ID always the same span.
func TestTracesSurviveRestartsAndAnAbsentCollector(t *testing.T) {
	t.Parallel()
	_, _, js := natstest.Run(t)
	ctx := context.Background()
	if err := Setup(ctx, js); err != nil {
		t.Fatal(err)
	}
	rcv := otlptest.New(t)
	harness := sessionlog.New(js, sessionlog.Options{As: sessionlog.Harness})
	sandbox := sessionlog.New(js, sessionlog.Options{As: sessionlog.Sandbox})
	session, call := uuid.Must(uuid.NewV7()), uuid.New()
	h := func(typ string) event.Header { return event.NewHeader(typ, "acme", session) }

	stop := startTracing(t, js, rcv)
	requested := &event.SessionRequested{Header: h(event.TypeSessionRequested), Request: uuid.New(), User: "ada", Model: "openai:gpt-test", Prompt: "go"}
	record(t, harness, requested)
	record(t, harness, &event.ModelResponded{Header: h(event.TypeModelResponded), Turn: 1, Model: "openai:gpt-test", StopReason: "tool_use",
		Usage:   model.Usage{InputTokens: 10, OutputTokens: 2},
		Content: []model.Block{{Type: model.ToolUseBlock, ID: "toolu_1", Name: "Bash", Input: json.RawMessage(`{"command":"ls"}`)}},
		Calls:   []event.Call{{ID: call, ToolUseID: "toolu_1", Name: "Bash"}}})
	dispatched := &event.ToolDispatched{Header: h(event.TypeToolDispatched), Call: call, Turn: 1, Name: "Bash", Service: "sandbox"}
	record(t, harness, dispatched)
	natstest.WaitFor(t, 10*time.Second, func() error {
		if n := len(spansByID(t, rcv)); n != 1 {
			return fmt.Errorf("%d spans, want the first chat's", n)
		}
		return nil
	})
	stop()

	// While no gateway runs, the call ends and so does the session.
	record(t, sandbox, &event.ToolCompleted{Header: h(event.TypeToolCompleted), Call: call, Name: "Bash", Output: "a\n", Service: "sandbox", User: "ada"})
	record(t, harness, &event.ModelResponded{Header: h(event.TypeModelResponded), Turn: 2, Model: "openai:gpt-test", StopReason: "end_turn", Usage: model.Usage{InputTokens: 20, OutputTokens: 3}})
	record(t, harness, &event.SessionCompleted{Header: h(event.TypeSessionCompleted), Answer: "a", Turns: 2})
	rcv.Refuse(3)
	startTracing(t, js, rcv)

	var got map[string]otlptest.Span
	natstest.WaitFor(t, 30*time.Second, func() error {
		got = spansByID(t, rcv)
		if len(got) != 4 {
			return fmt.Errorf("%d spans (%d posts), want 2 chats, a call and a run", len(got), rcv.Posts())
		}
		return nil
	})
	if rcv.Posts() < 5 {
		t.Errorf("%d posts: want the refused ones tried again", rcv.Posts())
	}
	byName := map[string][]otlptest.Span{}
	for _, s := range got {
		byName[s.Name] = append(byName[s.Name], s)
	}
	run, tool := byName["invoke_agent corral"], byName["execute_tool Bash"]
	if len(run) != 1 || len(tool) != 1 || len(byName["chat gpt-test"]) != 2 {
		t.Fatalf("spans %v", byName)
	}
	if tool[0].Parent != run[0].ID || !tool[0].Start.Equal(dispatched.Time) || tool[0].Attrs["gen_ai.tool.call.id"] != "toolu_1" {
		t.Errorf("call %+v: want the run's child, from its dispatch at %s", tool[0], dispatched.Time)
	}
	if !run[0].Start.Equal(requested.Time) || run[0].TraceID != hexID(session) || run[0].Attrs["gen_ai.usage.input_tokens"] != int64(30) {
		t.Errorf("run %+v: want it from %s, in trace %s", run[0], requested.Time, hexID(session))
	}
	if run[0].Resource["service.name"] != "corral" {
		t.Errorf("resource %v", run[0].Resource)
	}
}

func hexID(id uuid.UUID) string { return fmt.Sprintf("%x", id[:]) }

// TestTracesEndpointFromEnvironment reads where spans go as the OTLP
// exporter does, and refuses settings it cannot honour.
func TestTracesEndpointFromEnvironment(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, want, err string
		env             map[string]string
	}{
		{name: "none set"},
		{name: "base", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, want: "http://collector:4318/v1/traces"},
		{name: "base with a path", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://otel.example/prefix/"}, want: "https://otel.example/prefix/v1/traces"},
		{name: "traces first", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b:9999/custom"}, want: "http://b:9999/custom"},
		{name: "disabled", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_SDK_DISABLED": "true"}},
		{name: "exporter none", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_TRACES_EXPORTER": "none"}},
		{name: "grpc", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, err: "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{name: "not a URL", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "collector:4318"}, err: "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"},
		{name: "zipkin", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, err: "OTEL_TRACES_EXPORTER"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tracesEndpoint(func(k string) string { return tc.env[k] })
			switch {
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("error %v, want one naming %s", err, tc.err)
			case tc.err == "" && (err != nil || got != tc.want):
				t.Errorf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// A failed export's error, logged at each retry, names the collector by
// its scheme and host alone: an endpoint's path or query may carry a
// secret.
func TestTracesExportErrorsRedactTheEndpoint(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", http.StatusServiceUnavailable)
	}))
	srv.Close() // nothing listens: the export fails to connect
	for _, endpoint := range []string{srv.URL + "/s3cr3t-path/v1/traces?token=s3cr3t-query", "http://user:s3cr3t-pass@" + strings.TrimPrefix(srv.URL, "http://") + "/v1/traces?token=s3cr3t-query"} {
		tr, err := newTracer(context.Background(), endpoint)
		if err != nil {
			t.Fatal(err)
		}
		err = tr.exporter.ExportSpans(context.Background(), []sdktrace.ReadOnlySpan{tracetest.SpanStub{Name: "chat"}.Snapshot()})
		if err == nil {
			t.Fatal("an export to a closed port succeeded")
		}
		if got := redactEndpoint(err).Error(); strings.Contains(got, "s3cr3t") {
			t.Errorf("the export's error names the endpoint's secret: %s", got)
		}
	}
}
