package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/model"
)

// decodeBody reads resp's JSON body into v.
func decodeBody(resp *http.Response, v any) error {
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%d %s", resp.StatusCode, b)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// quantiles reports the p50, p95 and p99 of ds in milliseconds.
func quantiles(b *testing.B, ds []time.Duration) {
	b.Helper()
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	q := func(p int) float64 { return float64(ds[min(len(ds)-1, len(ds)*p/100)]) / float64(time.Millisecond) }
	b.ReportMetric(q(50), "p50-ms")
	b.ReportMetric(q(95), "p95-ms")
	b.ReportMetric(q(99), "p99-ms")
}

// response is a model's response of turn, as the harness records it.
func response(session interface{ String() string }, ev *event.ModelResponded, turn int) {
	ev.Turn = turn
	ev.Content = []model.Block{{Type: model.TextBlock, Text: fmt.Sprintf("turn %d of %s", turn, session)}}
}

// BenchmarkEventToSSE measures how long an event appended to a session's
// log takes to reach a client of the API's event stream: from the
// harness's append (a model's response, whose API events are written
// together) to the stream's first event of it read by the client, over
// HTTP on loopback. jetstream, the baseline: the same append to the same
// event's delivery to an ordered consumer's handler on another
// connection, the least the stream could take.
func BenchmarkEventToSSE(b *testing.B) {
	b.Run("jetstream", func(b *testing.B) {
		a := newAPI(b)
		session := a.startSession(b)
		js, err := jetstream.New(a.client)
		if err != nil {
			b.Fatal(err)
		}
		last, err := lastSeq(context.Background(), js, "acme", session)
		if err != nil {
			b.Fatal(err)
		}
		oc, err := js.OrderedConsumer(context.Background(), bus.StreamEvents, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{bus.SessionEvents("acme", session)},
			DeliverPolicy:  jetstream.DeliverByStartSequencePolicy, OptStartSeq: last + 1,
		})
		if err != nil {
			b.Fatal(err)
		}
		heard := make(chan time.Time, 1)
		cc, err := oc.Consume(func(jetstream.Msg) { heard <- time.Now() })
		if err != nil {
			b.Fatal(err)
		}
		defer cc.Stop()
		ds := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			ev := &event.ModelResponded{Header: event.NewHeader(event.TypeModelResponded, "acme", session), Model: "openai:m"}
			response(session, ev, i+1)
			at := time.Now()
			a.record(b, ev)
			ds = append(ds, (<-heard).Sub(at))
		}
		quantiles(b, ds)
	})
	b.Run("sse", func(b *testing.B) {
		a := newAPI(b)
		session := a.startSession(b)
		resp := a.get(b, "/v1/sessions/"+session.String()+"/events/stream")
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("stream: %d", resp.StatusCode)
		}
		r := newSSEReader(resp.Body)
		heard := make(chan time.Time, 4)
		go func() {
			for {
				ev, err := r.next()
				if err != nil {
					return
				}
				if ev.name == "span.model_request_start" {
					heard <- time.Now()
				}
			}
		}()
		ds := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			ev := &event.ModelResponded{Header: event.NewHeader(event.TypeModelResponded, "acme", session), Model: "openai:m"}
			response(session, ev, i+1)
			at := time.Now()
			a.record(b, ev)
			select {
			case t := <-heard:
				ds = append(ds, t.Sub(at))
			case <-time.After(10 * time.Second):
				b.Fatal("the stream sent nothing within 10s")
			}
		}
		quantiles(b, ds)
	})
}

// BenchmarkListEvents measures pages of 100 events of a session of
// 1,000 model turns (3,002 API events), read in turn from its start to
// its end, as requests per second (bench.sh runs it on one core, with the
// embedded NATS server on the same core). page: as the gateway lists
// them; whole-log: the same with nothing kept of the session between
// requests, as each page read the whole log before; http: the baseline,
// the same page, encoded once, answered by a bare handler over the same
// HTTP stack.
func BenchmarkListEvents(b *testing.B) {
	const turns = 1000
	a := newAPI(b)
	session := a.startSession(b)
	for turn := 1; turn <= turns; turn++ {
		ev := &event.ModelResponded{Header: event.NewHeader(event.TypeModelResponded, "acme", session), Model: "openai:m"}
		response(session, ev, turn)
		a.record(b, ev)
	}
	path := "/v1/sessions/" + session.String() + "/events"
	list := func(b *testing.B) {
		var next string
		for i := 0; i < b.N; i++ {
			q := url.Values{"limit": {"100"}}
			if next != "" {
				q.Set("page", next)
			}
			resp := a.get(b, path+"?"+q.Encode())
			var page struct {
				NextPage *string `json:"next_page"`
			}
			err := decodeBody(resp, &page)
			if err != nil {
				b.Fatal(err)
			}
			next = ""
			if page.NextPage != nil {
				next = *page.NextPage
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
	}
	b.Run("page", func(b *testing.B) {
		// The session's first read folds its whole log, once (as
		// whole-log does for each page).
		if err := decodeBody(a.get(b, path+"?limit=1"), &struct{}{}); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		list(b)
	})
	b.Run("whole-log", func(b *testing.B) {
		kept := a.s.folds
		a.s.folds = newFoldCache(0) // keeps nothing
		defer func() { a.s.folds = kept }()
		list(b)
	})
	b.Run("http", func(b *testing.B) {
		resp := a.get(b, path+"?limit=100")
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			b.Fatal(err)
		}
		mux := a.srv.Config.Handler
		a.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(body)
		})
		defer func() { a.srv.Config.Handler = mux }()
		b.ResetTimer()
		list(b)
	})
}
