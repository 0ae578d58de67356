// Package otlptest is an OTLP/HTTP trace receiver for tests: an
// httptest server that decodes what an OTLP exporter posts to /v1/traces
// (protobuf, gzipped or not) and keeps every span it was sent, duplicates
// included, and that can be told to refuse requests for a while.
package otlptest

import (
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Span is a span as the receiver got it.
type Span struct {
	TraceID, ID, Parent string // hex; Parent "" for a root
	Name                string
	Kind                tracepb.Span_SpanKind
	Start, End          time.Time
	Attrs               map[string]any
	// Status is the span's status code; StatusMessage its description.
	Status        tracepb.Status_StatusCode
	StatusMessage string
	// Resource is its resource's attributes; Scope its scope's name.
	Resource map[string]any
	Scope    string
}

// Receiver is a running receiver.
type Receiver struct {
	// URL is the traces endpoint (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT).
	URL string

	mu     sync.Mutex
	spans  []Span
	refuse int
	posts  int
}

// New starts a receiver, closed when the test ends.
func New(t testing.TB) *Receiver {
	r := &Receiver{}
	srv := httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(srv.Close)
	r.URL = srv.URL + "/v1/traces"
	return r
}

// Refuse has the next n requests answered 503, as a collector that is
// away.
func (r *Receiver) Refuse(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refuse = n
}

// Posts counts the requests received, refused ones included.
func (r *Receiver) Posts() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.posts
}

// Spans returns every span received so far, in the order received.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.posts++
	refused := r.refuse > 0
	if refused {
		r.refuse--
	}
	r.mu.Unlock()
	if refused {
		http.Error(w, "collector away", http.StatusServiceUnavailable)
		return
	}
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, fmt.Sprintf("want a protobuf POST to /v1/traces, got %s %s %s", req.Method, req.URL.Path, req.Header.Get("Content-Type")), http.StatusBadRequest)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var msg coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var got []Span
	for _, rs := range msg.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				got = append(got, Span{
					TraceID: hex.EncodeToString(s.GetTraceId()), ID: hex.EncodeToString(s.GetSpanId()), Parent: hex.EncodeToString(s.GetParentSpanId()),
					Name: s.GetName(), Kind: s.GetKind(),
					Start: time.Unix(0, int64(s.GetStartTimeUnixNano())).UTC(), End: time.Unix(0, int64(s.GetEndTimeUnixNano())).UTC(),
					Attrs: attrs(s.GetAttributes()), Status: s.GetStatus().GetCode(), StatusMessage: s.GetStatus().GetMessage(),
					Resource: res, Scope: ss.GetScope().GetName(),
				})
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// attrs returns kvs as Go values: string, int64, float64, bool, or
// []any of those.
func attrs(kvs []*commonpb.KeyValue) map[string]any {
	out := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		out[kv.GetKey()] = value(kv.GetValue())
	}
	return out
}

func value(v *commonpb.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return x.IntValue
	case *commonpb.AnyValue_DoubleValue:
		return x.DoubleValue
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue
	case *commonpb.AnyValue_ArrayValue:
		var out []any
		for _, e := range x.ArrayValue.GetValues() {
			out = append(out, value(e))
		}
		return out
	}
	return nil
}
