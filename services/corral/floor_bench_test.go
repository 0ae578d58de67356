package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
)

// BenchmarkDurableFloor measures what the guarantees of a tool call and of
// a step cost with no Corral code: the same writes to the same streams
// and bucket, in the same order, each waiting for the one before as
// Corral's do, with the same kinds of consumers, by bare clients (one
// connection as the harness, one as the sandbox-manager), on events of
// 512 bytes that nothing encodes, signs, checks or folds. The command is
// an idle of [floorCommand], taken out of each op. A whole platform runs
// idle in the process, on the same server, so that its threads are as
// awake as around Corral's own calls and steps; each op starts after the
// same idle as theirs, with a bare round trip measured beside it.
// ToolCallRoundTrip − WarmCall and StepRoundTrip − WarmCall −
// ModelRoundTrip cannot come below these but by writing less, so these
// ratios to the round trip beside them are what Corral's own costs could
// be brought to with its design; the rest of those costs is its code's.
//
//   - call: the call queued (TOOLS) → delivered to the sandbox-manager →
//     marked started (calls bucket) → its result recorded right after the
//     session's last event → delivered to the harness (EVENTS);
//   - step: the model's response recorded on the condition that it
//     follows the session's last event → the call's tool.dispatched
//     recorded after it → the call as above;
//
// and, to weigh designs that drop a write (not Corral's; each would take
// changes to what the log holds and who reads it):
//
//   - step-dispatch-in-response: the response records the dispatch, no
//     tool.dispatched;
//   - step-calls-from-log: besides, the sandbox-manager takes its calls
//     from the session logs (a consumer of the responses), not from a
//     queue the harness writes to after the response.
//
// The step also reports its time stage by stage, as BenchmarkStepRoundTrip
// does, from when the server stored each stage's write: from the op's
// start to the response stored, to tool.dispatched stored, to the call
// marked started, to its result stored (the command taken out), to the
// result delivered to the harness's consumer (where the step goes on to
// fold it in and ask the model).
func BenchmarkDurableFloor(b *testing.B) {
	for _, v := range []struct {
		name       string
		response   bool // the model's response recorded first
		dispatched bool // and the call's tool.dispatched after it
		queued     bool // the call published on TOOLS, not taken from the log
	}{
		{"call", false, false, true},
		{"step", true, true, true},
		{"step-dispatch-in-response", true, false, true},
		{"step-calls-from-log", true, false, false},
	} {
		b.Run(v.name, func(b *testing.B) {
			f := newFloor(b, v.queued)
			paired := newPairedRoundTrip(b, f.admin)
			ds := make([]time.Duration, 0, b.N)
			f.op(b, v.response, v.dispatched, v.queued) // creates what the first op would
			f.ops = f.ops[:0]
			b.ResetTimer()
			for range b.N {
				paired.beforeOp(b)
				ds = append(ds, f.op(b, v.response, v.dispatched, v.queued))
			}
			b.StopTimer()
			percentiles(b, ds, "")
			paired.report(b)
			if v.response && v.dispatched && v.queued {
				f.stages(b).report(b)
			}
		})
	}
}

// floor is one session of BenchmarkDurableFloor, on the server of a
// platform of its own.
type floor struct {
	admin, harness jetstream.JetStream
	session        uuid.UUID
	last           uint64 // the stream sequence of the session's last event
	results        chan jetstream.Msg
	body           []byte
	command        atomic.Int64  // how long the last call's command took
	marked         atomic.Uint64 // the revision of the last call's mark
	ops            []floorOp
}

// floorOp is what [floor.stages] needs of an op: where its writes went,
// and when its result was delivered.
type floorOp struct {
	start                time.Time
	response, dispatched uint64 // stream sequences, 0 if not written
	marked               uint64 // revision in the calls bucket
	result               time.Time
	command              time.Duration
	delivered            time.Time
}

// floorCommand stands for the command of BenchmarkDurableFloor's calls:
// about a warm call's time.
const floorCommand = 2 * time.Millisecond

const floorTenant = "floor"

// The kinds of the floor's events: about as long as Corral's, but none
// that a service of the platform beside it reads.
const (
	floorResponded  = "floor.responded"
	floorDispatched = "floor.dispatched"
	floorCompleted  = "floor.completed"
)

// floorSubject is where an event of kind is recorded in session's log,
// as [sessionlog.Subject] names Corral's; every session's for uuid.Nil.
func floorSubject(session uuid.UUID, kind string) string {
	s := "*"
	if session != uuid.Nil {
		s = session.String()
	}
	return "events." + floorTenant + "." + s + "." + kind + ".harness"
}

func newFloor(b *testing.B, queued bool) *floor {
	b.Helper()
	// A whole platform, idle, beside the floor's clients: the server is
	// as busy, and the process's threads as awake, as around Corral's own
	// calls and steps.
	srv, admin, getenv := benchPlatform(b, func(modeltest.Conversation) (modeltest.Turn, error) {
		return modeltest.Turn{Text: "unused"}, nil
	})
	runServices(b, admin, getenv, true)
	_, harness := natstest.Connect(b, srv.ClientURL())
	_, sandbox := natstest.Connect(b, srv.ClientURL())
	f := &floor{
		admin: admin, harness: harness,
		session: uuid.Must(uuid.NewV7()),
		results: make(chan jetstream.Msg, 1),
		body:    bytes.Repeat([]byte("x"), 512),
	}
	// Not the benchmark's context, which ends with each of its runs.
	ctx := context.Background()
	calls, err := sandbox.KeyValue(ctx, bus.BucketCalls)
	if err != nil {
		b.Fatal(err)
	}
	// The sandbox-manager: marks each call started, records its result
	// on the condition that it follows the event the call names, acks.
	stream, cfg := bus.StreamTools, jetstream.ConsumerConfig{Durable: "floor-calls", FilterSubject: "tools.floor.>"}
	if !queued {
		stream, cfg = bus.StreamEvents, jetstream.ConsumerConfig{Durable: "floor-calls", FilterSubject: floorSubject(uuid.Nil, floorResponded)}
	}
	cfg.AckPolicy = jetstream.AckExplicitPolicy
	f.consume(b, sandbox, stream, cfg, func(m jetstream.Msg) {
		after := uint64(0)
		if !queued {
			md, err := m.Metadata()
			if err != nil {
				b.Error(err)
				return
			}
			after = md.Sequence.Stream
		} else {
			after = binary.BigEndian.Uint64(m.Data())
		}
		rev, err := calls.Create(ctx, floorTenant+"."+uuid.NewString(), []byte("node"))
		if err != nil {
			b.Error(err)
			return
		}
		f.marked.Store(rev)
		// The command's time, taken out of the op: the platform idles
		// meanwhile, as it does while a command runs.
		t := time.Now()
		time.Sleep(floorCommand)
		f.command.Store(int64(time.Since(t)))
		if _, err := sandbox.Publish(ctx, floorSubject(f.session, floorCompleted), f.body,
			jetstream.WithMsgID(uuid.NewString()),
			jetstream.WithExpectLastSequenceForSubject(after, bus.SessionEvents(floorTenant, f.session))); err != nil {
			// The result may reach the harness, and the run end and close
			// this connection, before its ack reaches here.
			if !errors.Is(err, nats.ErrConnectionClosed) {
				b.Error(err)
			}
			return
		}
		_ = m.Ack()
	})
	// The harness: a durable consumer of the results, as its steps'.
	f.consume(b, harness, bus.StreamEvents, jetstream.ConsumerConfig{
		Durable: "floor-steps", AckPolicy: jetstream.AckExplicitPolicy,
		FilterSubject: floorSubject(uuid.Nil, floorCompleted),
	}, func(m jetstream.Msg) {
		_ = m.Ack()
		f.results <- m
	})
	return f
}

func (f *floor) consume(b *testing.B, js jetstream.JetStream, stream string, cfg jetstream.ConsumerConfig, handle func(jetstream.Msg)) {
	b.Helper()
	cons, err := js.CreateOrUpdateConsumer(b.Context(), stream, cfg)
	if err != nil {
		b.Fatal(err)
	}
	cc, err := cons.Consume(handle, jetstream.PullMaxMessages(8))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cc.Stop)
}

// op runs one call or step and returns how long it took, from its first
// write to its result's delivery.
func (f *floor) op(b *testing.B, response, dispatched, queued bool) time.Duration {
	ctx := context.Background()
	start := time.Now()
	o := floorOp{start: start}
	record := func(kind string) uint64 {
		ack, err := f.harness.Publish(ctx, floorSubject(f.session, kind), f.body,
			jetstream.WithMsgID(uuid.NewString()),
			jetstream.WithExpectLastSequenceForSubject(f.last, bus.SessionEvents(floorTenant, f.session)))
		if err != nil {
			b.Fatal(err)
		}
		f.last = ack.Sequence
		return ack.Sequence
	}
	if response {
		o.response = record(floorResponded)
	}
	if dispatched {
		o.dispatched = record(floorDispatched)
	}
	if queued {
		call := binary.BigEndian.AppendUint64(nil, f.last)
		call = append(call, f.body[8:]...)
		if _, err := f.harness.Publish(ctx, "tools.floor."+f.session.String(), call, jetstream.WithMsgID(uuid.NewString())); err != nil {
			b.Fatal(err)
		}
	}
	var m jetstream.Msg
	select {
	case m = <-f.results:
	case <-time.After(time.Minute):
		b.Fatal("no result after a minute")
	}
	o.delivered = time.Now()
	o.command = time.Duration(f.command.Load())
	took := o.delivered.Sub(start) - o.command
	md, err := m.Metadata()
	if err != nil {
		b.Fatal(err)
	}
	if md.Sequence.Stream != f.last+1 {
		b.Fatalf("result at %d, not right after %d", md.Sequence.Stream, f.last)
	}
	f.last = md.Sequence.Stream
	o.marked, o.result = f.marked.Load(), md.Timestamp
	f.ops = append(f.ops, o)
	return took
}

// stages reads back when the server stored each write of the ops, and
// returns the ops' times stage by stage.
func (f *floor) stages(b *testing.B) *stepStages {
	b.Helper()
	ctx := b.Context()
	stream := func(name string) jetstream.Stream {
		s, err := f.admin.Stream(ctx, name)
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	events, calls := stream(bus.StreamEvents), stream("KV_"+bus.BucketCalls)
	stored := func(s jetstream.Stream, seq uint64) time.Time {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			b.Fatalf("%s %d: %v", s.CachedInfo().Config.Name, seq, err)
		}
		return m.Time
	}
	var st stepStages
	for _, o := range f.ops {
		resp, disp := stored(events, o.response), stored(events, o.dispatched)
		marked := stored(calls, o.marked)
		st.response = append(st.response, resp.Sub(o.start))
		st.dispatched = append(st.dispatched, disp.Sub(resp))
		st.marked = append(st.marked, marked.Sub(disp))
		st.result = append(st.result, o.result.Sub(marked)-o.command)
		st.next = append(st.next, o.delivered.Sub(o.result))
	}
	return &st
}
