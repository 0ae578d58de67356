package bus_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/natstest"
)

// consume runs bus.Consume on the TOOLS stream until the test ends.
func consume(t *testing.T, js jetstream.JetStream, c bus.Consumer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	c.Stream = bus.StreamTools
	c.Config.Durable = "test-" + strings.ReplaceAll(t.Name(), "/", "-")
	c.Config.FilterSubject = "tools.test.>"
	if c.RetryDelay == 0 {
		c.RetryDelay = 10 * time.Millisecond
	}
	go func() { done <- bus.Consume(ctx, js, c) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("consume: %v", err)
		}
	})
}

type payload struct {
	N int `json:"n"`
}

func publish(t *testing.T, js jetstream.JetStream, id string, data []byte) {
	t.Helper()
	if _, err := js.Publish(context.Background(), "tools.test.acme."+uuid.NewString(), data, jetstream.WithMsgID(id)); err != nil {
		t.Fatal(err)
	}
}

// eventSubject is an event subject of the six-token shape, written out
// here rather than by package sessionlog, which owns it: bus reads raw
// messages whatever they say.
func eventSubject(tenant string, session uuid.UUID, kind, writer string) string {
	return "events." + tenant + "." + session.String() + "." + kind + "." + writer
}

func TestConsumeAcksAndRetries(t *testing.T) {
	t.Parallel()
	_, _, js := natstest.Run(t)
	var mu sync.Mutex
	attempts := map[int]int{}
	consume(t, js, bus.Consumer{Handler: bus.Decode(func(ctx context.Context, p *payload) error {
		mu.Lock()
		defer mu.Unlock()
		attempts[p.N]++
		if p.N == 2 && attempts[p.N] < 3 {
			return errors.New("transient")
		}
		return nil
	})})
	publish(t, js, "one", []byte(`{"n":1}`))
	publish(t, js, "two", []byte(`{"n":2}`))
	natstest.WaitFor(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if attempts[1] != 1 || attempts[2] != 3 {
			return fmt.Errorf("attempts = %v, want 1:1 2:3", attempts)
		}
		return nil
	})
	natstest.WaitFor(t, 5*time.Second, func() error {
		s, err := js.Stream(context.Background(), bus.StreamTools)
		if err != nil {
			return err
		}
		if n := s.CachedInfo().State.Msgs; n != 0 {
			return fmt.Errorf("%d messages left on the work queue", n)
		}
		return nil
	})
	if dl := natstest.DeadLetters(t, js, "deadletter.>"); len(dl) != 0 {
		t.Errorf("dead letters = %v, want none", dl)
	}
}

// A handler that knows when it can go on has its message back then, not
// after the consumer's RetryDelay.
func TestConsumeNotYetAfter(t *testing.T) {
	t.Parallel()
	_, _, js := natstest.Run(t)
	var attempts atomic.Int32
	consume(t, js, bus.Consumer{
		RetryDelay: time.Hour,
		Handler: func(ctx context.Context, m bus.Msg) error {
			if attempts.Add(1) < 4 {
				return bus.NotYet(20*time.Millisecond, errors.New("lease held"))
			}
			return nil
		},
	})
	publish(t, js, "one", []byte(`{"n":1}`))
	natstest.WaitFor(t, 10*time.Second, func() error {
		if n := attempts.Load(); n != 4 {
			return fmt.Errorf("attempts = %d, want 4", n)
		}
		return nil
	})
	if !errors.Is(bus.NotYet(time.Second, errors.New("x")), bus.ErrNotYet) {
		t.Error("NotYet does not match ErrNotYet")
	}
}

func TestConsumeGivesUpPoison(t *testing.T) {
	t.Parallel()
	_, _, js := natstest.Run(t)
	var handled, gaveUp atomic.Int32
	consume(t, js, bus.Consumer{
		Config: jetstream.ConsumerConfig{MaxDeliver: 3},
		Handler: bus.Decode(func(ctx context.Context, p *payload) error {
			handled.Add(1)
			switch p.N {
			case 1:
				return bus.Permanent(errors.New("never works"))
			case 2:
				return errors.New("keeps failing")
			case 3:
				panic("boom")
			}
			return nil
		}),
		OnGiveUp: func(ctx context.Context, m bus.Msg, reason error) error {
			gaveUp.Add(1)
			return nil
		},
	})
	publish(t, js, "bad-json", []byte(`{not json`))
	publish(t, js, "permanent", []byte(`{"n":1}`))
	publish(t, js, "failing", []byte(`{"n":2}`))
	publish(t, js, "panics", []byte(`{"n":3}`))
	publish(t, js, "fine", []byte(`{"n":4}`))
	natstest.WaitFor(t, 15*time.Second, func() error {
		if n := len(natstest.DeadLetters(t, js, "deadletter.>")); n != 4 {
			return fmt.Errorf("%d dead letters, want 4", n)
		}
		return nil
	})
	reasons := map[string]bool{}
	for _, dl := range natstest.DeadLetters(t, js, "deadletter.>") {
		reasons[dl.Reason] = true
		if dl.Stream != bus.StreamTools || len(dl.Data) == 0 || dl.Delivered == 0 {
			t.Errorf("dead letter lacks its origin: %+v", dl)
		}
	}
	for _, want := range []string{"decode", "never works", "keeps failing", "panic: boom"} {
		found := false
		for r := range reasons {
			found = found || strings.Contains(r, want)
		}
		if !found {
			t.Errorf("no dead letter says %q; reasons: %v", want, reasons)
		}
	}
	// permanent once, failing and panicking three times each, fine once.
	if got := handled.Load(); got != 8 {
		t.Errorf("handler ran %d times, want 8", got)
	}
	if got := gaveUp.Load(); got != 4 {
		t.Errorf("OnGiveUp ran %d times, want 4", got)
	}
}

// A message its handler rejects (it must not be believed) is given up at
// once and dead-lettered under bus.RejectedID, and OnGiveUp is not called:
// the message speaks for no one.
func TestConsumeRejected(t *testing.T) {
	t.Parallel()
	_, _, js := natstest.Run(t)
	var handled, gaveUp atomic.Int32
	consume(t, js, bus.Consumer{
		Handler: func(ctx context.Context, m bus.Msg) error {
			handled.Add(1)
			if m.MsgID == "forged" {
				return bus.Rejected(errors.New("a body naming another tenant"))
			}
			return nil
		},
		OnGiveUp: func(ctx context.Context, m bus.Msg, reason error) error {
			gaveUp.Add(1)
			return nil
		},
	})
	publish(t, js, "forged", []byte(`{}`))
	publish(t, js, "fine", []byte(`{}`))
	natstest.WaitFor(t, 10*time.Second, func() error {
		if n := len(natstest.DeadLetters(t, js, "deadletter.>")); n != 1 {
			return fmt.Errorf("%d dead letters, want 1", n)
		}
		s, err := js.Stream(context.Background(), bus.StreamTools)
		if err != nil {
			return err
		}
		if n := s.CachedInfo().State.Msgs; n != 0 {
			return fmt.Errorf("%d messages left on the work queue", n)
		}
		return nil
	})
	msgs, err := bus.ReadAll(context.Background(), js, bus.StreamDeadLetter, "deadletter.>")
	if err != nil {
		t.Fatal(err)
	}
	var dl event.DeadLetter
	if err := json.Unmarshal(msgs[0].Data, &dl); err != nil {
		t.Fatal(err)
	}
	if want := bus.RejectedID(bus.StreamTools, dl.StreamSeq); msgs[0].MsgID != want {
		t.Errorf("dead letter msg id = %q, want %q", msgs[0].MsgID, want)
	}
	if want := "deadletter." + bus.StreamTools + ".test-TestConsumeRejected"; msgs[0].Subject != want {
		t.Errorf("dead letter subject = %q, want %q", msgs[0].Subject, want)
	}
	if !strings.Contains(dl.Reason, "another tenant") || dl.Stream != bus.StreamTools {
		t.Errorf("dead letter = stream %q reason %q", dl.Stream, dl.Reason)
	}
	if n := handled.Load(); n != 2 {
		t.Errorf("handler ran %d times, want 2 (no redelivery of the rejected one)", n)
	}
	if n := gaveUp.Load(); n != 0 {
		t.Errorf("OnGiveUp ran %d times, want 0", n)
	}
}

func TestPublishDeduplicates(t *testing.T) {
	t.Parallel()
	_, _, js := natstest.Run(t)
	ctx := context.Background()
	s := uuid.Must(uuid.NewV7())
	subj := eventSubject("acme", s, "session.failed", "harness")
	for range 3 {
		if err := bus.Publish(ctx, js, subj, "same-id", map[string]string{"type": event.TypeSessionFailed}); err != nil {
			t.Fatal(err)
		}
	}
	msgs, err := bus.ReadAll(ctx, js, bus.StreamEvents, bus.SessionEvents("*", s))
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 {
		t.Fatalf("got %d events, want 1", len(msgs))
	}
	if want := "events.acme." + s.String() + ".session.failed.harness"; msgs[0].Subject != want {
		t.Errorf("subject = %q, want %q", msgs[0].Subject, want)
	}
}

func TestReadAllEmpty(t *testing.T) {
	t.Parallel()
	_, _, js := natstest.Run(t)
	msgs, err := bus.ReadAll(context.Background(), js, bus.StreamEvents, bus.SessionEvents("*", uuid.New()))
	if err != nil || len(msgs) != 0 {
		t.Fatalf("ReadAll = %v, %v; want nothing", msgs, err)
	}
}

func TestStartServerPortTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	_, err = bus.StartServer(bus.ServerConfig{Host: "127.0.0.1", Port: port, StoreDir: t.TempDir()})
	if !errors.Is(err, bus.ErrAddrInUse) {
		t.Fatalf("StartServer on a taken port: err = %v, want ErrAddrInUse", err)
	}
}

func TestParseSubject(t *testing.T) {
	id := uuid.New()
	tests := []struct {
		subject, tenant string
		ok              bool
	}{
		{bus.RequestSubject("acme", id, "alice"), "acme", true},
		{eventSubject("acme", id, "tool.completed", "sandbox"), "acme", true},
		{bus.ToolSubject(bus.ServiceSandbox, "acme", id), "acme", true},
		{"requests.acme", "", false},
		{"requests.acme.not-a-uuid", "", false},
		{"tools.sandbox.acme", "", false},
		{"", "", false},
	}
	for _, tc := range tests {
		tenant, session, err := bus.ParseSubject(tc.subject)
		if (err == nil) != tc.ok {
			t.Errorf("ParseSubject(%q) err = %v, want ok=%v", tc.subject, err, tc.ok)
			continue
		}
		if tc.ok && (tenant != tc.tenant || session != id) {
			t.Errorf("ParseSubject(%q) = %q, %s", tc.subject, tenant, session)
		}
	}
}

// A handler that runs longer than the ack wait keeps its message: the
// in-progress acks stop it from being redelivered meanwhile.
func TestLongHandlerKeepsItsMessage(t *testing.T) {
	t.Parallel()
	_, _, js := natstest.Run(t)
	var deliveries atomic.Int32
	done := make(chan struct{})
	consume(t, js, bus.Consumer{
		Config: jetstream.ConsumerConfig{AckWait: 300 * time.Millisecond},
		Handler: func(ctx context.Context, m bus.Msg) error {
			if deliveries.Add(1) == 1 {
				// Work for several ack waits.
				<-time.After(1500 * time.Millisecond)
				close(done)
			}
			return nil
		},
	})
	publish(t, js, "long", []byte(`{}`))
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("handler never finished")
	}
	if n := deliveries.Load(); n != 1 {
		t.Errorf("delivered %d times, want 1", n)
	}
}

// failed publishes a raw session.failed event of session s of acme
// under msgID, as the harness would record it.
func failed(t *testing.T, js jetstream.JetStream, s uuid.UUID, i int) {
	t.Helper()
	ev := &event.SessionFailed{Header: event.NewHeader(event.TypeSessionFailed, "acme", s), Code: "c", Reason: fmt.Sprint(i)}
	if err := bus.Publish(context.Background(), js, eventSubject("acme", s, "session.failed", "harness"), fmt.Sprintf("%s-%d", s, i), ev); err != nil {
		t.Fatal(err)
	}
}

func TestReadAfter(t *testing.T) {
	t.Parallel()
	_, _, js := natstest.Run(t)
	ctx := context.Background()
	a, b := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	for i := range 3 {
		for _, s := range []uuid.UUID{a, b} {
			failed(t, js, s, i)
		}
	}
	stream, err := js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	all, err := bus.ReadAfter(ctx, js, stream, bus.SessionEvents("acme", a), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 3 {
		t.Fatalf("%d events of session a, want 3", len(all))
	}
	rest, err := bus.ReadAfter(ctx, js, stream, bus.SessionEvents("acme", a), all[0].StreamSeq)
	if err != nil {
		t.Fatal(err)
	}
	if len(rest) != 2 || rest[0].StreamSeq != all[1].StreamSeq {
		t.Fatalf("after the first: %d events, want 2 starting at %d", len(rest), all[1].StreamSeq)
	}
	none, err := bus.ReadAfter(ctx, js, stream, bus.SessionEvents("acme", a), all[2].StreamSeq)
	if err != nil || len(none) != 0 {
		t.Errorf("after the last: %v, %v", none, err)
	}
	if want := eventSubject("acme", a, "session.failed", "harness"); all[0].Subject != want || all[0].MsgID != fmt.Sprintf("%s-0", a) {
		t.Errorf("first = subject %q msg id %q, want %q and %s-0", all[0].Subject, all[0].MsgID, want, a)
	}

	// More than one batch's worth, interleaved with another session's.
	const many = 700
	for i := 3; i < many; i++ {
		for _, s := range []uuid.UUID{a, b} {
			failed(t, js, s, i)
		}
	}
	got, err := bus.ReadAfter(ctx, js, stream, bus.SessionEvents("acme", b), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != many {
		t.Fatalf("%d events of session b, want %d", len(got), many)
	}
	for i, m := range got {
		var ev event.SessionFailed
		if err := json.Unmarshal(m.Data, &ev); err != nil || ev.Session != b || ev.Reason != fmt.Sprint(i) {
			t.Fatalf("event %d = %s, %v; want session b's reason %d", i, m.Data, err, i)
		}
	}
	// ReadAll and ReadByConsumer (a client's way) read the same.
	viaAll, err := bus.ReadAll(ctx, js, bus.StreamEvents, bus.SessionEvents("acme", b))
	if err != nil {
		t.Fatal(err)
	}
	before, err := js.AccountInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	viaConsumer, err := bus.ReadByConsumer(ctx, js, bus.StreamEvents, bus.SessionEvents("acme", b), 0)
	if err != nil {
		t.Fatal(err)
	}
	// One consumer for the whole read, not one a message: a few JetStream
	// API requests (its create and delete), whatever the log's length.
	after, err := js.AccountInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := after.API.Total - before.API.Total - 1; n > 3 { // less the AccountInfo before
		t.Errorf("reading %d messages made %d JetStream API requests, want at most 3", len(viaConsumer), n)
	}
	for name, msgs := range map[string][]bus.Msg{"ReadAll": viaAll, "ReadByConsumer": viaConsumer} {
		if !slices.EqualFunc(msgs, got, func(x, y bus.Msg) bool {
			return x.StreamSeq == y.StreamSeq && x.Subject == y.Subject && x.MsgID == y.MsgID && string(x.Data) == string(y.Data)
		}) {
			t.Errorf("%s read %d messages, not the %d ReadAfter read", name, len(msgs), len(got))
		}
	}
	tail, err := bus.ReadByConsumer(ctx, js, bus.StreamEvents, bus.SessionEvents("acme", b), got[many-3].StreamSeq)
	if err != nil {
		t.Fatal(err)
	}
	if len(tail) != 2 || tail[0].StreamSeq != got[many-2].StreamSeq {
		t.Errorf("ReadByConsumer after the third last: %d messages, want the last 2", len(tail))
	}
}

// LastBySubject gets the last message matching a filter, and says so when
// none does.
func TestLastBySubject(t *testing.T) {
	t.Parallel()
	_, _, js := natstest.Run(t)
	ctx := context.Background()
	a, b := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	failed(t, js, a, 0)
	failed(t, js, a, 1)
	failed(t, js, b, 0)
	m, err := bus.LastBySubject(ctx, js, bus.StreamEvents, bus.SessionEvents("acme", a))
	if err != nil {
		t.Fatal(err)
	}
	var ev event.SessionFailed
	if err := json.Unmarshal(m.Data, &ev); err != nil || ev.Session != a || ev.Reason != "1" || m.StreamSeq != 2 || m.MsgID != a.String()+"-1" {
		t.Errorf("last of a = seq %d msg id %q %s, want seq 2, a's reason 1", m.StreamSeq, m.MsgID, m.Data)
	}
	if _, err := bus.LastBySubject(ctx, js, bus.StreamEvents, bus.SessionEvents("acme", uuid.New())); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("last of a session with no events: err = %v, want ErrMsgNotFound", err)
	}
	if msgs, err := bus.ReadByConsumer(ctx, js, bus.StreamEvents, bus.SessionEvents("acme", uuid.New()), 0); err != nil || len(msgs) != 0 {
		t.Errorf("ReadByConsumer of a session with no events = %v, %v; want nothing", msgs, err)
	}
}

// A message whose handler runs past the ack wait, or that waits that long
// for a free handler, is kept with in-progress acks: it is not delivered
// again meanwhile.
func TestConsumeKeepsLongMessages(t *testing.T) {
	t.Parallel()
	_, _, js := natstest.Run(t)
	const wait = 600 * time.Millisecond
	var mu sync.Mutex
	calls := map[string]int{}
	release := make(chan struct{})
	consume(t, js, bus.Consumer{
		Config:      jetstream.ConsumerConfig{AckWait: wait},
		Concurrency: 1, // the second message waits for the first
		Handler: func(ctx context.Context, m bus.Msg) error {
			mu.Lock()
			calls[m.MsgID]++
			mu.Unlock()
			<-release
			return nil
		},
	})
	publish(t, js, "a", []byte(`{}`))
	publish(t, js, "b", []byte(`{}`))
	time.Sleep(3 * wait) // long enough for redeliveries, were there any
	close(release)
	natstest.WaitFor(t, 5*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if calls["a"] != 1 || calls["b"] != 1 {
			return fmt.Errorf("handled %v, want each message once", calls)
		}
		return nil
	})
}

// With AckDelay, a handled message is acknowledged a moment later, not at
// once: until then the work queue keeps it (it is not redelivered), and
// Consume sends the acks still waiting when it stops.
func TestConsumeDelaysAcks(t *testing.T) {
	t.Parallel()
	_, _, js := natstest.Run(t)
	ctx, cancel := context.WithCancel(context.Background())
	// Long enough that the test surely looks before it runs out, even on a
	// loaded machine.
	const delay = 2 * time.Second
	var mu sync.Mutex
	handled := map[string]int{}
	done := make(chan error, 1)
	go func() {
		done <- bus.Consume(ctx, js, bus.Consumer{
			Stream: bus.StreamTools,
			Config: jetstream.ConsumerConfig{Durable: "test-delayed", FilterSubject: "tools.test.>"},
			Handler: func(ctx context.Context, m bus.Msg) error {
				mu.Lock()
				handled[m.MsgID]++
				mu.Unlock()
				return nil
			},
			AckDelay: delay,
		})
	}()
	stream, err := js.Stream(ctx, bus.StreamTools)
	if err != nil {
		t.Fatal(err)
	}
	queued := func() uint64 {
		info, err := stream.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	publish(t, js, "a", []byte(`{}`))
	natstest.WaitFor(t, 5*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if handled["a"] != 1 {
			return fmt.Errorf("handled %v", handled)
		}
		return nil
	})
	if n := queued(); n != 1 {
		t.Errorf("%d messages queued just after the handler, want 1 (its ack waits)", n)
	}
	natstest.WaitFor(t, 5*time.Second, func() error {
		if n := queued(); n != 0 {
			return fmt.Errorf("%d messages queued after the delay", n)
		}
		return nil
	})
	// Stopping sends what waits.
	publish(t, js, "b", []byte(`{}`))
	natstest.WaitFor(t, 5*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if handled["b"] != 1 {
			return fmt.Errorf("handled %v", handled)
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 5*time.Second, func() error {
		if n := queued(); n != 0 {
			return fmt.Errorf("%d messages queued after Consume stopped", n)
		}
		return nil
	})
	if handled["a"] != 1 || handled["b"] != 1 {
		t.Errorf("handled %v, want each once", handled)
	}
}

// A message stored with headers only the server writes on its answers (a
// forged Nats-Subject and Nats-Sequence, as on an echo of a direct get's
// answer) is read with the subject and sequence the server gave it, by
// every reader, and marked spoofed; a message stored without them is not.
func TestSpoofedHeaders(t *testing.T) {
	t.Parallel()
	_, _, js := natstest.Run(t)
	ctx := context.Background()
	s := uuid.Must(uuid.NewV7())
	failed(t, js, s, 0)
	real := eventSubject("acme", s, "tool.completed", "sandbox")
	m := nats.NewMsg(real)
	m.Data = []byte(`{}`)
	m.Header.Set(jetstream.SubjectHeader, eventSubject("acme", s, "model.responded", "harness"))
	m.Header.Set(jetstream.SequenceHeader, "1")
	ack, err := js.PublishMsg(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	check := func(how string, got bus.Msg) {
		t.Helper()
		if got.Subject != real || got.StreamSeq != ack.Sequence || got.Spoofed == "" {
			t.Errorf("%s: subject %q seq %d spoofed %q; want %q, %d, spoofed", how, got.Subject, got.StreamSeq, got.Spoofed, real, ack.Sequence)
		}
	}
	filter := bus.SessionEvents("acme", s)
	all, err := bus.ReadAll(ctx, js, bus.StreamEvents, filter)
	if err != nil || len(all) != 2 {
		t.Fatalf("ReadAll = %d messages, %v; want 2", len(all), err)
	}
	if all[0].Spoofed != "" {
		t.Errorf("a message stored without the server's headers is marked spoofed: %q", all[0].Spoofed)
	}
	check("ReadAll", all[1])
	stream, err := js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	after, err := bus.ReadAfter(ctx, js, stream, filter, all[0].StreamSeq)
	if err != nil || len(after) != 1 {
		t.Fatalf("ReadAfter = %d messages, %v; want 1", len(after), err)
	}
	check("ReadAfter", after[0])
	last, err := bus.LastBySubject(ctx, js, bus.StreamEvents, filter)
	if err != nil {
		t.Fatal(err)
	}
	check("LastBySubject", last)
	byConsumer, err := bus.ReadByConsumer(ctx, js, bus.StreamEvents, filter, all[0].StreamSeq)
	if err != nil || len(byConsumer) != 1 {
		t.Fatalf("ReadByConsumer = %d messages, %v; want 1", len(byConsumer), err)
	}
	check("ReadByConsumer", byConsumer[0])

	// A forged sequence alone, far ahead, hides none of what follows.
	m = nats.NewMsg(real)
	m.Data = []byte(`{}`)
	m.Header.Set(jetstream.SequenceHeader, "1000000")
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	failed(t, js, s, 1)
	all, err = bus.ReadAll(ctx, js, bus.StreamEvents, filter)
	if err != nil || len(all) != 4 {
		t.Fatalf("ReadAll after a forged sequence = %d messages, %v; want 4", len(all), err)
	}
	if all[2].Spoofed == "" || all[2].StreamSeq != all[1].StreamSeq+1 || all[3].Spoofed != "" {
		t.Errorf("read %+v then %+v: want the forged sequence spoofed at its own, and the next", all[2], all[3])
	}
}
