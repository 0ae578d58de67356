package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
	"corral.dev/pkg/event"
	"corral.dev/pkg/model"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/sessionlog"
	"corral.dev/pkg/tool"
)

// inproc runs a harness and a sandbox-manager in this process against an
// embedded server, with a fake model running script.
func inproc(b *testing.B, script modeltest.Script) jetstream.JetStream {
	b.Helper()
	_, js, getenv := benchPlatform(b, script)
	runServices(b, js, getenv, true)
	return js
}

// benchPlatform starts an embedded server and a fake model running script,
// and returns the settings the services take.
func benchPlatform(b testing.TB, script modeltest.Script) (*server.Server, jetstream.JetStream, func(string) string) {
	b.Helper()
	srv, _, js := natstest.Run(b)
	fake := modeltest.New(b, script)
	env := map[string]string{
		"OPENAI_BASE_URL": fake.URL(), "OPENAI_API_KEY": "k",
		"CORRAL_DATA_DIR": b.TempDir(), "CORRAL_SHUTDOWN_GRACE": "1s",
		"CORRAL_NATS_URL": srv.ClientURL(),
	}
	maps.Copy(env, benchSettings(b))
	maps.Copy(env, callKeys)
	return srv, js, func(k string) string { return env[k] }
}

// benchSettings are the services' settings every benchmark platform
// shares, open or deployed: the fake model, priced (see [benchPolicy]),
// and no limit on a session's turns.
func benchSettings(b testing.TB) map[string]string {
	b.Helper()
	return map[string]string{"CORRAL_MODEL": "openai:bench", "CORRAL_MAX_TURNS": "1000000", "CORRAL_POLICY_FILE": benchPolicy(b), "CORRAL_HARNESS_SPEEDUPS": os.Getenv("CORRAL_HARNESS_SPEEDUPS"), "CORRAL_MODEL_STREAM": os.Getenv("CORRAL_MODEL_STREAM")}
}

// benchClient is the client a benchmark starts sessions with: its
// connection, and the tenant and user its requests are of; and a
// connection to the same server that may create consumers of every
// stream, for [pairedRoundTrip].
type benchClient struct {
	js     jetstream.JetStream
	tenant string
	user   string
	admin  jetstream.JetStream
}

// benchConfigs are the configurations the step and throughput benchmarks
// measure side by side, in one run, as sub-benchmarks of these names.
var benchConfigs = []struct {
	name  string
	start func(b *testing.B, script modeltest.Script) benchClient
}{
	{"open", openClient},
	{"deployed", deployedClient},
}

// openClient runs a harness and a sandbox-manager on an embedded server
// with no users, all on the one connection the client uses too, and
// returns that client, of tenant bench and user bench.
func openClient(b *testing.B, script modeltest.Script) benchClient {
	b.Helper()
	js := inproc(b, script)
	return benchClient{js: js, tenant: "bench", user: "bench", admin: js}
}

// deployedClient starts a deployment (deploy/nats.conf's server; the
// harness, sandbox-manager, memory, auth and approval services, each
// under its own user) with the benchmarks' settings, and returns its
// client, signed in with its credential through the auth service. The
// benchmark fails if anyone hit a permission violation.
func deployedClient(b *testing.B, script modeltest.Script) benchClient {
	b.Helper()
	d := startDeployment(b, script, benchSettings(b))
	js, v := connectWith(b, d.url, d.getenv("CORRAL_NATS_USER"), d.getenv("CORRAL_NATS_PASSWORD"))
	b.Cleanup(func() {
		all := maps.Clone(d.violations)
		all["client"] = v
		for who, v := range all {
			if errs := v.all(); len(errs) > 0 {
				b.Errorf("%s hit permission violations: %v", who, errs)
			}
		}
	})
	return benchClient{js: js, tenant: d.getenv("CORRAL_TENANT"), user: d.getenv("CORRAL_USER"), admin: d.admin}
}

// benchPolicy writes the default policy with the fake model priced at a
// hundredth of the default OpenAI model, so that budgets are checked as in
// a deployment without a long benchmark's sessions (whose conversations
// grow with every step) using up a day's budget, and no bound on a
// session's steps.
func benchPolicy(b testing.TB) string {
	b.Helper()
	data, err := os.ReadFile("../../deploy/policy.yaml")
	if err != nil {
		b.Fatal(err)
	}
	priced := strings.Replace(string(data), "\nprices:\n", "\nprices:\n  \"openai:bench\": {input: 0.02, output: 0.08}\n", 1)
	if priced == string(data) {
		b.Fatal("deploy/policy.yaml has no prices")
	}
	// Benchmark sessions run as many steps as they are measured for.
	unbounded := strings.Replace(priced, "\n    steps: 100 ", "\n    steps: 1000000 ", 1)
	if unbounded == priced {
		b.Fatal("deploy/policy.yaml bounds no session's steps at 100")
	}
	priced = unbounded
	file := filepath.Join(b.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(priced), 0o644); err != nil {
		b.Fatal(err)
	}
	return file
}

// runServices runs a sandbox-manager, and a harness if withHarness, in this
// process until the benchmark ends.
func runServices(b testing.TB, js jetstream.JetStream, getenv func(string) string, withHarness bool) {
	b.Helper()
	users := []string{credential.UserSandbox}
	if withHarness {
		users = []string{credential.UserHarness, credential.UserSandbox}
	}
	runComponents(b, envOn(js, getenv), users...)
}

// toolResults returns the results of session's tool calls as they are
// recorded, read by the durable consumer durable until ctx is done.
func toolResults(ctx context.Context, js jetstream.JetStream, durable, tenant string, session uuid.UUID) <-chan bus.Msg {
	results := make(chan bus.Msg, 1)
	go func() {
		_ = bus.Consume(ctx, js, bus.Consumer{
			Stream: bus.StreamEvents,
			Config: jetstream.ConsumerConfig{
				Durable:       durable,
				FilterSubject: sessionlog.SessionKind(tenant, session, event.TypeToolCompleted),
			},
			Handler: func(_ context.Context, m bus.Msg) error {
				results <- m
				return nil
			},
			Logger: slog.New(slog.DiscardHandler),
		})
	}()
	return results
}

// endsOfSessions follows the sessions of a tenant to their ends with one
// consumer per kind of end, as a client running many sessions would,
// rather than one consumer per session.
type endsOfSessions struct {
	mu      sync.Mutex
	waiting map[uuid.UUID]chan struct{}
}

// followEnds starts following the ends of c's tenant's sessions until the
// benchmark ends; a session that fails fails the benchmark. Each consumer
// has one filter, as a client's permissions require.
func followEnds(b *testing.B, c benchClient) *endsOfSessions {
	b.Helper()
	e := &endsOfSessions{waiting: make(map[uuid.UUID]chan struct{})}
	for _, typ := range []string{event.TypeSessionCompleted, event.TypeSessionFailed} {
		cons, err := c.js.OrderedConsumer(context.Background(), bus.StreamEvents, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{fmt.Sprintf("events.%s.*.%s.*", c.tenant, event.Kind(typ))},
		})
		if err != nil {
			b.Fatal(err)
		}
		cc, err := cons.Consume(e.ended(b))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(cc.Stop)
	}
	return e
}

// ended handles the end of a session.
func (e *endsOfSessions) ended(b *testing.B) jetstream.MessageHandler {
	return func(msg jetstream.Msg) {
		a, err := sessionlog.ParseSubject(msg.Subject())
		if err != nil {
			b.Error(err)
			return
		}
		session := a.Session
		if a.Type != event.TypeSessionCompleted {
			b.Errorf("session %s: %s", session, msg.Data())
		}
		e.mu.Lock()
		done := e.waiting[session]
		delete(e.waiting, session)
		e.mu.Unlock()
		if done != nil {
			close(done)
		}
	}
}

// start publishes a request of c's and returns a channel closed when the
// session ends.
func (e *endsOfSessions) start(b *testing.B, c benchClient) <-chan struct{} {
	session := uuid.Must(uuid.NewV7())
	done := make(chan struct{})
	e.mu.Lock()
	e.waiting[session] = done
	e.mu.Unlock()
	req := event.Request{Header: event.NewHeader(event.TypeRequest, c.tenant, session), User: c.user, Prompt: "go"}
	if err := bus.Publish(context.Background(), c.js, bus.RequestSubject(c.tenant, session, req.User), req.ID.String(), &req); err != nil {
		b.Fatal(err)
	}
	return done
}

// startSessionPrompt publishes a request of c's with prompt, and returns
// the new session and a channel closed when it ends; a session that does
// not complete fails the benchmark. It follows the session's lifecycle
// events with one consumer of one filter, as a client's permissions
// require.
func startSessionPrompt(b *testing.B, c benchClient, prompt string) (uuid.UUID, <-chan struct{}) {
	b.Helper()
	ctx := context.Background()
	session := uuid.Must(uuid.NewV7())
	done := make(chan struct{})
	cons, err := c.js.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{bus.SessionLifecycle(c.tenant, session)},
		InactiveThreshold: time.Second,
	})
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		defer close(done)
		for {
			msg, err := cons.Next(jetstream.FetchMaxWait(10 * time.Minute))
			if err != nil {
				b.Errorf("session %s: %v", session, err)
				return
			}
			if msg.Subject() == sessionlog.Subject(c.tenant, session, event.TypeSessionRequested, sessionlog.Harness) {
				continue
			}
			if msg.Subject() != sessionlog.Subject(c.tenant, session, event.TypeSessionCompleted, sessionlog.Harness) {
				b.Errorf("session %s: %s", session, msg.Data())
			}
			return
		}
	}()
	req := event.Request{Header: event.NewHeader(event.TypeRequest, c.tenant, session), User: c.user, Prompt: prompt}
	if err := bus.Publish(ctx, c.js, bus.RequestSubject(c.tenant, session, req.User), req.ID.String(), &req); err != nil {
		b.Fatal(err)
	}
	return session, done
}

// percentiles reports the p50 and p99 of ds in milliseconds.
func percentiles(b *testing.B, ds []time.Duration, prefix string) (p50, p99 float64) {
	b.Helper()
	if len(ds) == 0 {
		return 0, 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	p50, p99 = ms(ds[len(ds)/2]), ms(ds[min(len(ds)-1, len(ds)*99/100)])
	b.ReportMetric(p50, prefix+"p50-ms")
	b.ReportMetric(p99, prefix+"p99-ms")
	return p50, p99
}

// BenchmarkStepRoundTrip measures a whole step of a session around one
// tool call: the harness records the model's response and dispatches the
// call, the sandbox-manager runs `true` in the session's warm sandbox and
// records the result, and the harness folds it in and asks the model for
// the next turn. Each op is the time from the fake model's answer to its
// next request, as it comes whole (the fake's decoding it is the
// provider's time). The fake takes [modelTime] over each answer, not
// counted, as a model takes its turn: the platform idles meanwhile, as it
// does between a step and the next, and the sandbox has started its next
// call's shell, as in BenchmarkWarmCall. Sessions run one after the other,
// rtTurns calls each, so the conversation the harness sends stays small;
// each session's first call cold-starts its sandbox and is not counted. It runs in each of
// [benchConfigs], one after the other, and last in the open one with the
// model's responses asked for whole (CORRAL_MODEL_STREAM=off), as they
// were before they streamed: what streaming costs a step.
func BenchmarkStepRoundTrip(b *testing.B) {
	for _, cfg := range benchConfigs {
		b.Run(cfg.name, func(b *testing.B) { stepRoundTrip(b, cfg.start) })
	}
	b.Run("open-whole", func(b *testing.B) {
		b.Setenv("CORRAL_MODEL_STREAM", "off")
		stepRoundTrip(b, openClient)
	})
}

func stepRoundTrip(b *testing.B, newClient func(*testing.B, modeltest.Script) benchClient) {
	const rtTurns = 20
	var mu sync.Mutex
	var ds []time.Duration
	answered := map[string]time.Time{} // by session prompt
	asks := map[string]*modelTimes{}   // likewise
	var paired *pairedRoundTrip
	client := newClient(b, func(c modeltest.Conversation) (modeltest.Turn, error) {
		now := c.Received
		n := modeltest.Turns(c)
		key := c.Messages[0].Text
		mu.Lock()
		if n >= 2 {
			ds = append(ds, now.Sub(answered[key]))
		}
		if asks[key] == nil {
			asks[key] = &modelTimes{}
		}
		asks[key].received = append(asks[key].received, now)
		mu.Unlock()
		// The model's time: idle, a bare round trip from idle in its
		// middle, idle again.
		mu.Lock()
		p := paired
		mu.Unlock()
		p.measure(b)
		time.Sleep(modelTime)
		t := modeltest.Turn{Text: "done"}
		if n < rtTurns {
			t = modeltest.Turn{Calls: []modeltest.Call{{Name: "Bash", Input: map[string]any{"command": "true"}}}}
		}
		mu.Lock()
		answered[key] = time.Now()
		asks[key].answered = append(asks[key].answered, answered[key])
		mu.Unlock()
		return t, nil
	})
	mu.Lock()
	paired = newPairedRoundTrip(b, client.admin)
	mu.Unlock()
	sessions := map[string]uuid.UUID{}
	b.ResetTimer()
	for i := 0; i < b.N; i += rtTurns - 1 {
		prompt := fmt.Sprint("session ", i)
		session, done := startSessionPrompt(b, client, prompt)
		sessions[prompt] = session
		<-done
	}
	b.StopTimer()
	mu.Lock()
	defer mu.Unlock()
	percentiles(b, ds, "")
	paired.report(b)
	var stages stepStages
	for prompt, session := range sessions {
		stages.add(b, client, session, asks[prompt])
	}
	stages.report(b)
}

// modelTimes are when the fake model of a session got each of its
// requests whole, and when it answered each.
type modelTimes struct{ received, answered []time.Time }

// stepStages are where the steps of BenchmarkStepRoundTrip went, stage
// by stage, taken from when the server stored what each stage wrote
// (the server, the services and the fake model share the clock of this
// process): from the model's answer to its response stored (the answer
// read and decoded, the response encoded and sent), to its call's
// tool.dispatched stored, to the call marked started (queued, delivered,
// checked, marked), to its result stored (the command run, the workspace
// checked, the result sent), to the next request come whole to the model
// (the result delivered, folded in, the request built and sent). The
// first step of each session, which cold-starts its sandbox, is left out,
// as in the benchmark's own figure.
type stepStages struct{ response, dispatched, marked, result, next []time.Duration }

func (st *stepStages) add(b *testing.B, c benchClient, session uuid.UUID, m *modelTimes) {
	b.Helper()
	ctx := b.Context()
	calls, err := c.admin.KeyValue(ctx, bus.BucketCalls)
	if err != nil {
		b.Fatal(err)
	}
	cons, err := c.admin.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.SessionEvents(c.tenant, session)},
	})
	if err != nil {
		b.Fatal(err)
	}
	// One pull subscription for the whole log: an ordered consumer's Next
	// makes a consumer on the server for each message.
	msgs, err := cons.Messages()
	if err != nil {
		b.Fatal(err)
	}
	defer msgs.Stop()
	stored := map[string][]time.Time{} // by event type, in order
	var marked []time.Time
	for {
		msg, err := msgs.Next()
		if err != nil {
			b.Fatalf("session %s: %v", session, err)
		}
		md, err := msg.Metadata()
		if err != nil {
			b.Fatal(err)
		}
		a, err := sessionlog.ParseSubject(msg.Subject())
		if err != nil {
			b.Fatal(err)
		}
		stored[a.Type] = append(stored[a.Type], md.Timestamp)
		if a.Type == event.TypeToolDispatched {
			var d event.ToolDispatched
			if err := json.Unmarshal(msg.Data(), &d); err != nil {
				b.Fatal(err)
			}
			e, err := calls.Get(ctx, bus.CallKey(c.tenant, session, d.Call))
			if err != nil {
				b.Fatalf("mark of call %s: %v", d.Call, err)
			}
			marked = append(marked, e.Created())
		}
		if md.NumPending == 0 {
			break
		}
	}
	resp := stored[event.TypeModelResponded]
	disp := stored[event.TypeToolDispatched]
	done := stored[event.TypeToolCompleted]
	for i := 1; i < len(disp) && i < len(done) && i+1 < len(m.received); i++ {
		st.response = append(st.response, resp[i].Sub(m.answered[i]))
		st.dispatched = append(st.dispatched, disp[i].Sub(resp[i]))
		st.marked = append(st.marked, marked[i].Sub(disp[i]))
		st.result = append(st.result, done[i].Sub(marked[i]))
		st.next = append(st.next, m.received[i+1].Sub(done[i]))
	}
}

// report reports each stage's median, in ms.
func (st *stepStages) report(b *testing.B) {
	for _, s := range []struct {
		name string
		ds   []time.Duration
	}{
		{"response", st.response}, {"dispatched", st.dispatched}, {"marked", st.marked},
		{"result", st.result}, {"next", st.next},
	} {
		if len(s.ds) == 0 {
			continue
		}
		sort.Slice(s.ds, func(i, j int) bool { return s.ds[i] < s.ds[j] })
		b.ReportMetric(float64(s.ds[len(s.ds)/2])/float64(time.Millisecond), "stage-"+s.name+"-ms")
	}
}

// pairedRoundTrip is BenchmarkJetStreamRoundTrip's bare round trip,
// measured on the server of another benchmark, one op before each of its
// own after the same idle, so that the two see the machine alike: on a
// VM whose speed moves by half from one minute to the next, a ratio of
// two benchmarks run apart moves with it. Its p50 is reported beside the
// benchmark's own as paired-js-p50-ms.
type pairedRoundTrip struct {
	js   jetstream.JetStream
	cons jetstream.Consumer
	ds   []time.Duration
}

func newPairedRoundTrip(b *testing.B, js jetstream.JetStream) *pairedRoundTrip {
	b.Helper()
	cons, err := js.CreateOrUpdateConsumer(b.Context(), bus.StreamTools, jetstream.ConsumerConfig{
		Durable: "bench-paired", AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: "tools.bench-paired.>",
	})
	if err != nil {
		b.Fatal(err)
	}
	return &pairedRoundTrip{js: js, cons: cons}
}

// measure idles [modelTime], then makes one round trip.
func (p *pairedRoundTrip) measure(b *testing.B) {
	time.Sleep(modelTime)
	ctx := context.Background()
	t0 := time.Now()
	if _, err := p.js.Publish(ctx, "tools.bench-paired.x", []byte(`{}`), jetstream.WithMsgID(uuid.NewString())); err != nil {
		b.Error(err)
		return
	}
	msg, err := p.cons.Next()
	if err == nil {
		err = msg.DoubleAck(ctx)
	}
	if err != nil {
		b.Error(err)
		return
	}
	p.ds = append(p.ds, time.Since(t0))
}

// beforeOp measures one round trip and then idles [modelTime], off the
// benchmark's timer: what comes before each op of a benchmark whose
// platform idles between ops, as while the model takes its turn.
func (p *pairedRoundTrip) beforeOp(b *testing.B) {
	b.StopTimer()
	p.measure(b)
	time.Sleep(modelTime)
	b.StartTimer()
}

func (p *pairedRoundTrip) report(b *testing.B) {
	percentiles(b, p.ds, "paired-js-")
}

// BenchmarkToolCallRoundTrip measures one durable tool call on its own:
// published on the sandbox queue as the harness dispatches one, right
// after the session's last event; run by the sandbox-manager in the
// session's warm sandbox (`Bash true`) and its result recorded, on the
// condition that it follows that event; received through a durable
// consumer of results, as the harness's steps are. Each op is the time
// from publishing the call to receiving its result. Between calls the
// session idles 10 ms, as while the model takes its turn, and as in
// BenchmarkWarmCall, which is the command's part of it. The session's
// first call, which starts its sandbox, is not counted.
func BenchmarkToolCallRoundTrip(b *testing.B) {
	_, js, getenv := benchPlatform(b, func(modeltest.Conversation) (modeltest.Turn, error) {
		return modeltest.Turn{Text: "unused"}, nil
	})
	runServices(b, js, getenv, false)
	ctx := b.Context()
	const tenant = "bench"
	session := uuid.Must(uuid.NewV7())
	results := toolResults(ctx, js, "bench-results", tenant, session)
	key, err := event.DecodePrivateKey(getenv("CORRAL_CALL_SIGNING_KEY"))
	if err != nil {
		b.Fatal(err)
	}
	var after uint64
	call := func() time.Duration {
		c := event.ToolCall{
			Header: event.NewHeader(event.TypeToolCall, tenant, session),
			Call:   uuid.Must(uuid.NewV7()),
			Turn:   1,
			User:   "bench",
			Name:   tool.Bash,
			Input:  json.RawMessage(`{"command":"true"}`),
			After:  after,
		}
		// Signed as the harness signs the calls it queues.
		c.Sign(key, bus.ServiceSandbox)
		start := time.Now()
		if err := bus.Publish(ctx, js, bus.ToolSubject(bus.ServiceSandbox, tenant, session), c.Call.String(), &c); err != nil {
			b.Fatal(err)
		}
		var m bus.Msg
		select {
		case m = <-results:
		case <-time.After(time.Minute):
			b.Fatalf("no result of call %s after a minute", c.Call)
		}
		took := time.Since(start)
		var r event.ToolCompleted
		if err := json.Unmarshal(m.Data, &r); err != nil || r.Call != c.Call || r.IsError {
			b.Fatalf("result of %s: %s (%v)", c.Call, m.Data, err)
		}
		if after > 0 && r.After != after {
			b.Fatalf("result of %s recorded after %d, not right after %d", c.Call, r.After, after)
		}
		after = m.StreamSeq
		return took
	}
	call() // starts the sandbox
	paired := newPairedRoundTrip(b, js)
	ds := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		paired.beforeOp(b)
		ds = append(ds, call())
	}
	b.StopTimer()
	percentiles(b, ds, "")
	paired.report(b)
}

// modelTime is how long the fake model of the step benchmarks takes over
// each answer, as a model takes its turn: BenchmarkWarmCall and
// BenchmarkToolCallRoundTrip let the session idle as long between calls,
// and BenchmarkJetStreamRoundTrip the bare server.
const modelTime = 10 * time.Millisecond

// BenchmarkModelRoundTrip is the model's part of a step round trip,
// measured alone to be taken out of it: the harness's model client sends
// a conversation like the average one of BenchmarkStepRoundTrip (the
// harness's system prompt, the tools, ten Bash calls and their results)
// to the fake model, which decodes it and answers with one more call, and
// the client decodes the answer. The fake takes [modelTime] over its
// answer, as in the step; that and its decoding of the request are the
// provider's time, not counted: each op is the client's whole request
// less the fake's time from the request's coming whole to its answer.
func BenchmarkModelRoundTrip(b *testing.B) {
	const calls = 10
	var mu sync.Mutex
	var system string
	js := inproc(b, func(c modeltest.Conversation) (modeltest.Turn, error) {
		mu.Lock()
		system = c.System
		mu.Unlock()
		return modeltest.Turn{Text: "done"}, nil
	})
	_, done := startSessionPrompt(b, benchClient{js: js, tenant: "bench", user: "bench"}, "session 0")
	<-done
	var held time.Duration // the fake's time over the last answer
	fake := modeltest.New(b, func(c modeltest.Conversation) (modeltest.Turn, error) {
		time.Sleep(modelTime)
		mu.Lock()
		held = time.Since(c.Received)
		mu.Unlock()
		return modeltest.Turn{Calls: []modeltest.Call{{Name: "Bash", Input: map[string]any{"command": "true"}}}}, nil
	})
	client := model.NewOpenAI(model.Config{BaseURL: fake.URL(), APIKey: "k", NoStream: os.Getenv("CORRAL_MODEL_STREAM") == "off"})
	mu.Lock()
	req := model.Request{Model: "bench", System: system, Tools: tool.Specs(), MaxTokens: 8192,
		Messages: []model.Message{{Role: model.User, Content: []model.Block{{Type: model.TextBlock, Text: "session 1"}}}}}
	mu.Unlock()
	for i := range calls {
		id := fmt.Sprintf("call_%d", i)
		req.Messages = append(req.Messages,
			model.Message{Role: model.Assistant, Content: []model.Block{{Type: model.ToolUseBlock, ID: id, Name: "Bash", Input: json.RawMessage(`{"command":"true"}`)}}},
			model.Message{Role: model.User, Content: []model.Block{{Type: model.ToolResultBlock, ToolUseID: id}}})
	}
	var ds []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if _, err := client.Complete(b.Context(), req); err != nil {
			b.Fatal(err)
		}
		took := time.Since(t0)
		mu.Lock()
		ds = append(ds, took-held)
		mu.Unlock()
	}
	b.StopTimer()
	percentiles(b, ds, "")
}

// BenchmarkThroughput keeps 64 sessions in flight whose model asks for a
// Glob per turn (a call that runs no process) and answers instantly, and
// reports tool calls per second. Each session makes tpTurns calls, and a
// new one starts as one ends, so that the conversations the harness sends
// and the fake model parses stay small. It runs in each of
// [benchConfigs], one after the other.
func BenchmarkThroughput(b *testing.B) {
	for _, cfg := range benchConfigs {
		b.Run(cfg.name, func(b *testing.B) { throughput(b, cfg.start) })
	}
}

func throughput(b *testing.B, newClient func(*testing.B, modeltest.Script) benchClient) {
	const sessions, tpTurns = 64, 10
	client := newClient(b, func(c modeltest.Conversation) (modeltest.Turn, error) {
		if modeltest.Turns(c) < tpTurns {
			return modeltest.Turn{Calls: []modeltest.Call{{Name: "Glob", Input: map[string]any{"pattern": "*"}}}}, nil
		}
		return modeltest.Turn{Text: "done"}, nil
	})
	per := max(b.N/(sessions*tpTurns), 1)
	ends := followEnds(b, client)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for range sessions {
		wg.Go(func() {
			for range per {
				<-ends.start(b, client)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(sessions*per*tpTurns)/elapsed.Seconds(), "calls/s")
}

// BenchmarkJetStreamRoundTrip is the bare baseline: publish a message to a
// work-queue stream and wait for its ack, then fetch it from a durable pull
// consumer and ack it, waiting for the server to confirm. The server and
// its client idle 10 ms before each op, as BenchmarkToolCallRoundTrip's
// session does between its calls and BenchmarkStepRoundTrip's while its
// model takes its turn: what a round trip costs here depends most on
// whether the threads it wakes were asleep, and the figures it is the
// baseline of all start from sleep.
func BenchmarkJetStreamRoundTrip(b *testing.B) {
	jetStreamRoundTrip(b, modelTime)
}

// BenchmarkJetStreamRoundTripBackToBack is the same round trip, each op
// right after the one before, while the server and client are still
// awake.
func BenchmarkJetStreamRoundTripBackToBack(b *testing.B) {
	jetStreamRoundTrip(b, 0)
}

func jetStreamRoundTrip(b *testing.B, idle time.Duration) {
	_, _, js := natstest.Run(b)
	ctx := context.Background()
	cons, err := js.CreateOrUpdateConsumer(ctx, bus.StreamTools, jetstream.ConsumerConfig{
		Durable: "bench", AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: "tools.bench.>",
	})
	if err != nil {
		b.Fatal(err)
	}
	ds := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		if idle > 0 {
			b.StopTimer()
			time.Sleep(idle)
			b.StartTimer()
		}
		t0 := time.Now()
		if _, err := js.Publish(ctx, "tools.bench.x", []byte(`{}`), jetstream.WithMsgID(fmt.Sprint(i))); err != nil {
			b.Fatal(err)
		}
		msg, err := cons.Next()
		if err != nil {
			b.Fatal(err)
		}
		if err := msg.DoubleAck(ctx); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
	}
	b.StopTimer()
	percentiles(b, ds, "")
}
