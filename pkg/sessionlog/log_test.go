package sessionlog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/sessionlog"
)

// A stub whose stored event is missing, altered, another tenant's or named
// by something that is not a hash is skipped and dead-lettered; it does
// not fail the read, and the events around it are read.
func TestReadSkipsUnresolvableStubs(t *testing.T) {
	t.Parallel()
	_, _, js := natstest.Run(t)
	ctx := context.Background()
	l := newLog(js, sessionlog.Harness)
	s := uuid.Must(uuid.NewV7())
	subject := sessionlog.Subject("acme", s, event.TypeSessionFailed, sessionlog.Harness)
	stub := func(tenant, object string) *event.Offloaded {
		return &event.Offloaded{Header: event.NewHeader(event.TypeOffloaded, tenant, s), Of: event.TypeSessionFailed, Object: object, Size: 10}
	}
	zeros := strings.Repeat("0", 64)
	// Stored under the hash of nothing it holds.
	if _, err := js.Publish(ctx, bus.PayloadSubject("acme", zeros), encode(t, failed("acme", s, "altered"))); err != nil {
		t.Fatal(err)
	}
	// Another tenant's large event, stored as the log would have it.
	if err := l.Record(ctx, failed("other", s, strings.Repeat("y", 2*sessionlog.OffloadThreshold)), "theirs"); err != nil {
		t.Fatal(err)
	}
	raw, err := bus.ReadAll(ctx, js, bus.StreamEvents, bus.SessionEvents("other", s))
	if err != nil || len(raw) != 1 {
		t.Fatalf("the other tenant's log: %d messages, %v", len(raw), err)
	}
	var theirs event.Offloaded
	if err := json.Unmarshal(raw[0].Data, &theirs); err != nil || theirs.Type != event.TypeOffloaded {
		t.Fatalf("the other tenant's event is not a stub: %s", raw[0].Data)
	}

	if err := l.Record(ctx, failed("acme", s, "before"), "before"); err != nil {
		t.Fatal(err)
	}
	bad := map[uint64]string{
		natstest.Forge(t, js, subject, stub("acme", "sha256-"+strings.Repeat("1", 64))):      sessionlog.ReasonUnresolvable, // missing
		natstest.Forge(t, js, subject, stub("acme", "sha256-"+zeros)):                        sessionlog.ReasonUnresolvable, // altered
		natstest.Forge(t, js, subject, stub("acme", theirs.Object)):                          sessionlog.ReasonUnresolvable, // not under acme
		natstest.Forge(t, js, subject, stub("other", theirs.Object)):                         sessionlog.ReasonTenant,       // names the other tenant
		natstest.Forge(t, js, subject, stub("acme", "sha256-"+strings.Repeat("a", 62)+".>")): sessionlog.ReasonUnresolvable, // a wildcard
		natstest.Forge(t, js, subject, stub("acme", "sha256-"+strings.Repeat(" ", 64))):      sessionlog.ReasonUnresolvable, // spaces
		natstest.Forge(t, js, subject, stub("acme", "sha256-"+strings.Repeat("A", 64))):      sessionlog.ReasonUnresolvable, // upper case
		natstest.Forge(t, js, subject, stub("acme", "md5-"+zeros)):                           sessionlog.ReasonUnresolvable, // another hash
	}
	if err := l.Record(ctx, failed("acme", s, "after"), "after"); err != nil {
		t.Fatal(err)
	}

	for _, reader := range []*sessionlog.Log{l, sessionlog.New(js, sessionlog.Options{Reader: "client", Client: true})} {
		entries, _, err := reader.ReadAll(ctx, "acme", s)
		if err != nil {
			t.Fatalf("ReadAll: %v", err)
		}
		if want := []string{"before", "after"}; !slices.Equal(reasons(entries), want) {
			t.Errorf("read %v, want %v", reasons(entries), want)
		}
	}
	dls := deadLetters(t, js)
	if len(dls) != len(bad) {
		t.Errorf("%d dead letters, want %d", len(dls), len(bad))
	}
	for _, dl := range dls {
		want, ok := bad[dl.Letter.StreamSeq]
		if !ok {
			t.Errorf("dead letter of seq %d, which is no bad stub: %s", dl.Letter.StreamSeq, dl.Letter.Reason)
			continue
		}
		if !strings.HasPrefix(dl.Letter.Reason, want+": ") {
			t.Errorf("seq %d dead-lettered for %q, want reason %s", dl.Letter.StreamSeq, dl.Letter.Reason, want)
		}
	}
}

// Forged events (a writer that may not write them, a body naming another
// tenant, a result from a service the call was not dispatched to) are left
// out of every read, and dead-lettered once however often, and by however
// many Logs, they are read. The events around them are read.
func TestReadLeavesOutForgedEvents(t *testing.T) {
	t.Parallel()
	_, _, js := natstest.Run(t)
	ctx := context.Background()
	harness, sandbox := newLog(js, sessionlog.Harness), newLog(js, sessionlog.Sandbox)
	s := uuid.Must(uuid.NewV7())
	h := func(typ string) event.Header { return event.NewHeader(typ, "acme", s) }
	record := func(l *sessionlog.Log, ev event.Event) {
		t.Helper()
		if err := l.Record(ctx, ev, ev.Head().ID.String()); err != nil {
			t.Fatal(err)
		}
	}
	alice := sessionlog.Writer(bus.UserToken("alice"))
	c1 := uuid.New()
	forged := map[uint64]string{}

	record(harness, &event.SessionRequested{Header: h(event.TypeSessionRequested), User: "alice", Prompt: "hi"})
	// A client answering for the model.
	forged[natstest.Forge(t, js, sessionlog.Subject("acme", s, event.TypeModelResponded, alice),
		&event.ModelResponded{Header: h(event.TypeModelResponded), Turn: 1, Calls: []event.Call{{ID: uuid.New(), Name: "Bash", Service: bus.ServiceSandbox}}})] = sessionlog.ReasonWriter
	record(harness, &event.ModelResponded{Header: h(event.TypeModelResponded), Turn: 1, Calls: []event.Call{{ID: c1, Name: "Bash", Service: bus.ServiceSandbox}}})
	// Another tenant's event in this session's log.
	forged[natstest.Forge(t, js, sessionlog.Subject("acme", s, event.TypeSessionFailed, sessionlog.Harness), failed("evil", s, "theirs"))] = sessionlog.ReasonTenant
	// Memory answering a call dispatched to the sandbox.
	forged[natstest.Forge(t, js, sessionlog.Subject("acme", s, event.TypeToolCompleted, sessionlog.Memory),
		&event.ToolCompleted{Header: h(event.TypeToolCompleted), Call: c1, Name: "Bash", Output: "forged", Service: bus.ServiceMemory})] = sessionlog.ReasonNotDispatch
	record(sandbox, &event.ToolCompleted{Header: h(event.TypeToolCompleted), Call: c1, Name: "Bash", Output: "real", Service: bus.ServiceSandbox})
	// A client stopping the session itself, not by a request.
	forged[natstest.Forge(t, js, sessionlog.Subject("acme", s, event.TypeSessionStopped, alice), &event.SessionStopped{Header: h(event.TypeSessionStopped), By: "alice"})] = sessionlog.ReasonWriter
	record(harness, &event.SessionCompleted{Header: h(event.TypeSessionCompleted), Answer: "done", Turns: 1})

	want := []string{event.TypeSessionRequested, event.TypeModelResponded, event.TypeToolCompleted, event.TypeSessionCompleted}
	other := sessionlog.New(js, sessionlog.Options{As: sessionlog.Approval, Reader: "test2", DeadLetters: true})
	client := sessionlog.New(js, sessionlog.Options{Reader: "client", Client: true})
	var last []sessionlog.Entry
	for i, l := range []*sessionlog.Log{harness, harness, other, client} {
		entries, sess, err := l.ReadAll(ctx, "acme", s)
		if err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		if !slices.Equal(types(entries), want) {
			t.Fatalf("read %d: %v, want %v", i, types(entries), want)
		}
		if r := entries[2].Event.(*event.ToolCompleted); r.Output != "real" || entries[2].Writer != sessionlog.Sandbox {
			t.Errorf("read %d: the result is %q by %s, want the sandbox's", i, r.Output, entries[2].Writer)
		}
		if sess.User() != "alice" {
			t.Errorf("read %d: the session's user is %q, want alice", i, sess.User())
		}
		for _, e := range entries {
			if _, bad := forged[e.Seq]; bad {
				t.Errorf("read %d: the forged event at %d was read", i, e.Seq)
			}
		}
		last = entries
	}
	// Read from a fresh session and after 0 reads the same.
	entries, err := harness.Read(ctx, sessionlog.NewSession("acme", s), 0)
	if err != nil || !slices.Equal(types(entries), want) {
		t.Errorf("Read after 0: %v, %v; want %v", types(entries), err, want)
	}

	checkDeadLetters := func() {
		t.Helper()
		dls := deadLetters(t, js)
		if len(dls) != len(forged) {
			t.Errorf("%d dead letters, want %d, one per forged event", len(dls), len(forged))
		}
		for _, dl := range dls {
			reason, ok := forged[dl.Letter.StreamSeq]
			switch {
			case !ok:
				t.Errorf("dead letter of seq %d, which was not forged: %s", dl.Letter.StreamSeq, dl.Letter.Reason)
			case !strings.HasPrefix(dl.Letter.Reason, reason+": "):
				t.Errorf("seq %d dead-lettered for %q, want reason %s", dl.Letter.StreamSeq, dl.Letter.Reason, reason)
			}
			if want := bus.RejectedID(bus.StreamEvents, dl.Letter.StreamSeq); dl.Msg.MsgID != want {
				t.Errorf("dead letter msg id %q, want %q", dl.Msg.MsgID, want)
			}
			if want := "deadletter." + bus.StreamEvents + ".test"; dl.Msg.Subject != want || dl.Letter.Consumer != "test" || dl.Letter.Stream != bus.StreamEvents {
				t.Errorf("dead letter on %q by %q of %q, want on %q by test of EVENTS", dl.Msg.Subject, dl.Letter.Consumer, dl.Letter.Stream, want)
			}
			if len(dl.Letter.Data) == 0 || !strings.HasPrefix(dl.Letter.Subject, "events.acme.") {
				t.Errorf("dead letter lacks the event: subject %q, %d bytes", dl.Letter.Subject, len(dl.Letter.Data))
			}
		}
	}
	checkDeadLetters()

	// Following the log: only what came after, judged by what came before.
	_, sess, err := harness.ReadAll(ctx, "acme", s)
	if err != nil {
		t.Fatal(err)
	}
	after := last[len(last)-1].Seq
	c2 := uuid.New()
	record(harness, &event.ModelResponded{Header: h(event.TypeModelResponded), Turn: 2, Calls: []event.Call{{ID: c2, Name: "Bash"}}})
	forged[natstest.Forge(t, js, sessionlog.Subject("acme", s, event.TypeToolCompleted, sessionlog.Sandbox),
		&event.ToolCompleted{Header: h(event.TypeToolCompleted), Call: c2, Name: "Bash", Output: "forged", Service: bus.ServiceSandbox})] = sessionlog.ReasonNotDispatch
	record(harness, &event.ToolCompleted{Header: h(event.TypeToolCompleted), Call: c2, Name: "Bash", Output: "refused"})
	for i := range 2 {
		entries, err := harness.Read(ctx, sess.Clone(), after)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{event.TypeModelResponded, event.TypeToolCompleted}; !slices.Equal(types(entries), want) {
			t.Fatalf("read %d after %d: %v, want %v", i, after, types(entries), want)
		}
		if w := entries[1].Writer; w != sessionlog.Harness {
			t.Errorf("read %d after %d: the result by %s, want the harness's", i, after, w)
		}
	}
	checkDeadLetters()
}

// A consumer's handler returns a rejection as it is: bus.Consume
// dead-letters the message once, with the Log's own dead letter or
// without one, and never calls OnGiveUp, whose error result would speak
// for the session.
func TestConsumeDeadLettersRejected(t *testing.T) {
	t.Parallel()
	for _, logDeadLetters := range []bool{false, true} {
		t.Run(fmt.Sprintf("log dead letters %v", logDeadLetters), func(t *testing.T) {
			t.Parallel()
			_, _, js := natstest.Run(t)
			ctx, cancel := context.WithCancel(context.Background())
			l := sessionlog.New(js, sessionlog.Options{As: sessionlog.Harness, Reader: "test", DeadLetters: logDeadLetters})
			s := uuid.Must(uuid.NewV7())
			var mu sync.Mutex
			var handled []string
			var gaveUp int
			done := make(chan error, 1)
			go func() {
				done <- bus.Consume(ctx, js, bus.Consumer{
					Stream:     bus.StreamEvents,
					Config:     jetstream.ConsumerConfig{Durable: "test-steps", FilterSubject: sessionlog.KindFilter(event.TypeSessionFailed)},
					RetryDelay: 10 * time.Millisecond,
					Handler: func(ctx context.Context, m bus.Msg) error {
						e, err := l.Judge(ctx, m)
						if err != nil {
							return err
						}
						mu.Lock()
						defer mu.Unlock()
						handled = append(handled, e.Event.(*event.SessionFailed).Reason)
						return nil
					},
					OnGiveUp: func(ctx context.Context, m bus.Msg, reason error) error {
						mu.Lock()
						defer mu.Unlock()
						gaveUp++
						return nil
					},
				})
			}()
			t.Cleanup(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("consume: %v", err)
				}
			})
			if err := l.Record(ctx, failed("acme", s, "one"), "one"); err != nil {
				t.Fatal(err)
			}
			bad := natstest.Forge(t, js, sessionlog.Subject("acme", s, event.TypeSessionFailed, sessionlog.Sandbox), failed("acme", s, "forged"))
			if err := l.Record(ctx, failed("acme", s, "two"), "two"); err != nil {
				t.Fatal(err)
			}
			natstest.WaitFor(t, 10*time.Second, func() error {
				mu.Lock()
				defer mu.Unlock()
				if len(handled) != 2 {
					return fmt.Errorf("handled %v", handled)
				}
				if n := len(deadLetters(t, js)); n != 1 {
					return fmt.Errorf("%d dead letters", n)
				}
				cons, err := js.Consumer(ctx, bus.StreamEvents, "test-steps")
				if err != nil {
					return err
				}
				info, err := cons.Info(ctx)
				if err != nil {
					return err
				}
				if info.NumAckPending != 0 || info.NumPending != 0 {
					return fmt.Errorf("%d messages wait for an ack, %d to be delivered", info.NumAckPending, info.NumPending)
				}
				return nil
			})
			mu.Lock()
			defer mu.Unlock()
			slices.Sort(handled) // handled concurrently
			if want := []string{"one", "two"}; !slices.Equal(handled, want) {
				t.Errorf("handled %v, want %v", handled, want)
			}
			if gaveUp != 0 {
				t.Errorf("OnGiveUp ran %d times, want 0", gaveUp)
			}
			dl := deadLetters(t, js)[0]
			if dl.Letter.StreamSeq != bad || dl.Msg.MsgID != bus.RejectedID(bus.StreamEvents, bad) || !strings.HasPrefix(dl.Letter.Reason, sessionlog.ReasonWriter+": ") {
				t.Errorf("dead letter of seq %d under %q for %q, want seq %d under %q for %s", dl.Letter.StreamSeq, dl.Msg.MsgID, dl.Letter.Reason, bad, bus.RejectedID(bus.StreamEvents, bad), sessionlog.ReasonWriter)
			}
		})
	}
}

// Last and First return accepted events alone, skipping forged ones, and
// say so when there is none.
func TestLastAndFirst(t *testing.T) {
	t.Parallel()
	_, _, js := natstest.Run(t)
	ctx := context.Background()
	l := newLog(js, sessionlog.Harness)
	s := uuid.Must(uuid.NewV7())
	h := func(typ string) event.Header { return event.NewHeader(typ, "acme", s) }
	for _, reader := range []*sessionlog.Log{l, sessionlog.New(js, sessionlog.Options{Reader: "client", Client: true})} {
		if _, ok, err := reader.First(ctx, "acme", s, event.TypeSessionRequested); ok || err != nil {
			t.Errorf("First of an empty session: %v, %v; want none", ok, err)
		}
		if _, ok, err := reader.Last(ctx, "acme", s, event.TypeSessionFailed); ok || err != nil {
			t.Errorf("Last of an empty session: %v, %v; want none", ok, err)
		}
	}
	natstest.Forge(t, js, sessionlog.Subject("acme", s, event.TypeSessionRequested, sessionlog.Writer(bus.UserToken("mallory"))),
		&event.SessionRequested{Header: h(event.TypeSessionRequested), User: "mallory", Prompt: "forged"})
	if err := l.Record(ctx, &event.SessionRequested{Header: h(event.TypeSessionRequested), User: "alice", Prompt: "first"}, "q1"); err != nil {
		t.Fatal(err)
	}
	if err := l.Record(ctx, &event.SessionRequested{Header: h(event.TypeSessionRequested), User: "alice", Prompt: "second"}, "q2"); err != nil {
		t.Fatal(err)
	}
	c := uuid.New()
	if err := l.Record(ctx, &event.ModelResponded{Header: h(event.TypeModelResponded), Turn: 1, Calls: []event.Call{{ID: c, Name: "Bash", Service: bus.ServiceSandbox}}}, "r1"); err != nil {
		t.Fatal(err)
	}
	if err := newLog(js, sessionlog.Sandbox).Record(ctx, &event.ToolCompleted{Header: h(event.TypeToolCompleted), Call: c, Output: "real", Service: bus.ServiceSandbox}, "t1"); err != nil {
		t.Fatal(err)
	}
	if err := l.Record(ctx, failed("acme", s, "real"), "f1"); err != nil {
		t.Fatal(err)
	}
	// Forged last events of each kind.
	natstest.Forge(t, js, sessionlog.Subject("acme", s, event.TypeToolCompleted, sessionlog.Memory),
		&event.ToolCompleted{Header: h(event.TypeToolCompleted), Call: c, Output: "forged", Service: bus.ServiceMemory})
	natstest.Forge(t, js, sessionlog.Subject("acme", s, event.TypeSessionFailed, sessionlog.Harness), failed("evil", s, "forged"))

	for i, reader := range []*sessionlog.Log{l, sessionlog.New(js, sessionlog.Options{Reader: "client", Client: true})} {
		first, ok, err := reader.First(ctx, "acme", s, event.TypeSessionRequested)
		if err != nil || !ok || first.Event.(*event.SessionRequested).Prompt != "first" {
			t.Errorf("reader %d: First = %+v, %v, %v; want alice's first request", i, first.Event, ok, err)
		}
		last, ok, err := reader.Last(ctx, "acme", s, event.TypeSessionFailed)
		if err != nil || !ok || last.Event.(*event.SessionFailed).Reason != "real" {
			t.Errorf("reader %d: Last failure = %+v, %v, %v; want the real one", i, last.Event, ok, err)
		}
		last, ok, err = reader.Last(ctx, "acme", s, event.TypeToolCompleted)
		if err != nil || !ok || last.Event.(*event.ToolCompleted).Output != "real" {
			t.Errorf("reader %d: Last result = %+v, %v, %v; want the sandbox's", i, last.Event, ok, err)
		}
		last, ok, err = reader.Last(ctx, "acme", s, event.TypeSessionRequested, event.TypeModelResponded)
		if err != nil || !ok || last.Type != event.TypeModelResponded {
			t.Errorf("reader %d: Last of two types = %+v, %v, %v; want the response", i, last.Event, ok, err)
		}
	}
}
