package sessionlog_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/sessionlog"
)

// A large event is stored in PAYLOADS once, the log keeps a small stub,
// and readers get the whole event back.
func TestRecordOffloadsLargeEvents(t *testing.T) {
	t.Parallel()
	_, _, js := natstest.Run(t)
	ctx := context.Background()
	l := newLog(js, sessionlog.Harness)
	s := uuid.Must(uuid.NewV7())
	c1, c2 := uuid.New(), uuid.New()
	responded := &event.ModelResponded{Header: event.NewHeader(event.TypeModelResponded, "acme", s), Turn: 1, Calls: []event.Call{{ID: c1, Name: "Bash"}, {ID: c2, Name: "Bash"}}}
	big := strings.Repeat("x", 3*sessionlog.OffloadThreshold)
	small := &event.ToolCompleted{Header: event.NewHeader(event.TypeToolCompleted, "acme", s), Call: c1, Name: "Bash", Output: "short"}
	large := &event.ToolCompleted{Header: event.NewHeader(event.TypeToolCompleted, "acme", s), Call: c2, Name: "Bash", Output: big}
	for i, ev := range []event.Event{responded, small, large} {
		if err := l.Record(ctx, ev, fmt.Sprintf("m%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Record(ctx, large, "m2"); !errors.Is(err, sessionlog.ErrDuplicate) {
		t.Errorf("recording m2 again: err = %v, want ErrDuplicate", err)
	}
	raw, err := bus.ReadAll(ctx, js, bus.StreamEvents, bus.SessionEvents("acme", s))
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) != 3 {
		t.Fatalf("%d log messages, want 3 (the repeat is a duplicate)", len(raw))
	}
	if n := len(raw[2].Data); n > 1024 {
		t.Errorf("the large event's log message is %d bytes; want a small stub", n)
	}
	if want := bus.SessionKey("acme", s) + ":m2"; raw[2].MsgID != want {
		t.Errorf("msg id = %q, want %q: namespaced by tenant and session", raw[2].MsgID, want)
	}
	entries, _, err := l.ReadAll(ctx, "acme", s)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{event.TypeModelResponded, event.TypeToolCompleted, event.TypeToolCompleted}; !slices.Equal(types(entries), want) {
		t.Fatalf("read %v, want %v", types(entries), want)
	}
	got := entries[2].Event.(*event.ToolCompleted)
	if got.Output != big || got.Type != event.TypeToolCompleted || got.Call != c2 || got.ID != large.ID {
		t.Errorf("resolved event differs: type %s, call %s, %d bytes of output", got.Type, got.Call, len(got.Output))
	}
	if entries[2].Seq != raw[2].StreamSeq || entries[2].Subject != raw[2].Subject {
		t.Errorf("entry at seq %d on %q, want the stub's %d on %q", entries[2].Seq, entries[2].Subject, raw[2].StreamSeq, raw[2].Subject)
	}

	// The same content again is stored once.
	if err := l.Record(ctx, large, "m3"); err != nil {
		t.Fatal(err)
	}
	payloads, err := js.Stream(ctx, bus.StreamPayloads)
	if err != nil {
		t.Fatal(err)
	}
	if st := payloads.CachedInfo().State; st.Msgs != 1 || st.LastSeq != 1 {
		t.Errorf("PAYLOADS holds %d messages, last at %d; want the one stored once", st.Msgs, st.LastSeq)
	}
	// The same event (its ID) recorded again is stored, but not folded
	// twice.
	if entries, _, err = l.ReadAll(ctx, "acme", s); err != nil || len(entries) != 3 {
		t.Errorf("read %d entries, %v; want 3", len(entries), err)
	}
}

func TestAppend(t *testing.T) {
	t.Parallel()
	_, _, js := natstest.Run(t)
	ctx := context.Background()
	l := newLog(js, sessionlog.Harness)
	a, b := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	first, err := l.Append(ctx, failed("acme", a, "a1"), "a1", 0)
	if err != nil {
		t.Fatalf("first event of a session, after 0: %v", err)
	}
	// Another session's events do not count.
	if err := l.Record(ctx, failed("acme", b, "b1"), "b1"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, failed("acme", a, "stale"), "stale", 0); !errors.Is(err, sessionlog.ErrNotLast) || !bus.Conflict(err) {
		t.Errorf("append after 0 to a session with an event: %v, want ErrNotLast and a conflict", err)
	}
	second, err := l.Append(ctx, failed("acme", a, "a2"), "a2", first)
	if err != nil || second <= first {
		t.Fatalf("append after the last event: seq %d, %v (the first was %d)", second, err, first)
	}
	// One written without the condition in between, as a sandbox's result
	// would be.
	if err := l.Record(ctx, failed("acme", a, "other"), "other"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, failed("acme", a, "behind"), "behind", second); !errors.Is(err, sessionlog.ErrNotLast) {
		t.Errorf("append behind the log: %v, want ErrNotLast", err)
	}
	if _, err := l.Append(ctx, failed("acme", a, "a2 again"), "a2", second); !errors.Is(err, sessionlog.ErrNotLast) && !errors.Is(err, sessionlog.ErrDuplicate) {
		t.Errorf("append of a2 again: %v, want it refused", err)
	}
	entries, _, err := l.ReadAll(ctx, "acme", a)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a1", "a2", "other"}; !slices.Equal(reasons(entries), want) {
		t.Errorf("session a's log holds %v, want %v", reasons(entries), want)
	}
	if entries[0].Seq != first || entries[1].Seq != second {
		t.Errorf("entries at %d and %d, want %d and %d as Append said", entries[0].Seq, entries[1].Seq, first, second)
	}
}

// Message IDs are a session's own: another tenant's session of the same ID
// recording under the same message ID is not a duplicate of it.
func TestRecordMsgIDsPerSession(t *testing.T) {
	t.Parallel()
	_, _, js := natstest.Run(t)
	ctx := context.Background()
	l := newLog(js, sessionlog.Harness)
	s := uuid.Must(uuid.NewV7())
	for _, tenant := range []string{"acme", "evil"} {
		if err := l.Record(ctx, failed(tenant, s, tenant), "same"); err != nil {
			t.Errorf("tenant %s: %v", tenant, err)
		}
	}
	if err := l.Record(ctx, failed("acme", s, "again"), "same"); !errors.Is(err, sessionlog.ErrDuplicate) {
		t.Errorf("acme again: %v, want ErrDuplicate", err)
	}
	for _, tenant := range []string{"acme", "evil"} {
		entries, _, err := l.ReadAll(ctx, tenant, s)
		if err != nil {
			t.Fatal(err)
		}
		if got := reasons(entries); !slices.Equal(got, []string{tenant}) {
			t.Errorf("tenant %s's log holds %v, want its own event alone", tenant, got)
		}
	}
}

// A tool service records a result right after the event its call followed
// when nothing came in between, and without the condition otherwise; a
// result recorded again changes nothing. A result is stamped with the time
// it is recorded, its end.
func TestRecordResult(t *testing.T) {
	t.Parallel()
	_, _, js := natstest.Run(t)
	ctx := context.Background()
	harness, sandbox := newLog(js, sessionlog.Harness), newLog(js, sessionlog.Sandbox)
	s := uuid.Must(uuid.NewV7())
	c1, c2 := uuid.New(), uuid.New()
	after, err := harness.Append(ctx, &event.ModelResponded{Header: event.NewHeader(event.TypeModelResponded, "acme", s), Turn: 1, Calls: []event.Call{
		{ID: c1, Name: "Bash", Service: bus.ServiceSandbox},
		{ID: c2, Name: "Bash", Service: bus.ServiceSandbox},
	}}, "r1", 0)
	if err != nil {
		t.Fatal(err)
	}
	result := func(call uuid.UUID, output string) *event.ToolCompleted {
		return &event.ToolCompleted{Header: event.NewHeader(event.TypeToolCompleted, "acme", s), Call: call, Name: "Bash", Output: output, Service: bus.ServiceSandbox}
	}
	r1 := result(c1, "one")
	started := r1.Time
	r1.Time = started.Add(-time.Minute) // made when the call started
	if err := sandbox.RecordResult(ctx, r1, &event.ToolCall{Call: c1, After: after}); err != nil {
		t.Fatal(err)
	}
	if r1.Time.Before(started) {
		t.Errorf("result stamped %s, before it was recorded (%s): want the time of its end", r1.Time, started)
	}
	if r1.After != after {
		t.Errorf("result recorded right after %d says After %d", after, r1.After)
	}
	if err := sandbox.RecordResult(ctx, result(c1, "one again"), &event.ToolCall{Call: c1}); err != nil {
		t.Errorf("recording a result again: %v, want it counted as recorded", err)
	}
	// c2's call followed the response too, but c1's result came between.
	r2 := result(c2, "two")
	if err := sandbox.RecordResult(ctx, r2, &event.ToolCall{Call: c2, After: after}); err != nil {
		t.Fatal(err)
	}
	if r2.After != 0 {
		t.Errorf("result recorded with something in between says After %d, want 0", r2.After)
	}
	entries, _, err := harness.ReadAll(ctx, "acme", s)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries[1:] {
		r := e.Event.(*event.ToolCompleted)
		got = append(got, fmt.Sprintf("%s after %d", r.Output, r.After))
	}
	if want := []string{fmt.Sprintf("one after %d", after), "two after 0"}; !slices.Equal(got, want) {
		t.Errorf("results %v, want %v", got, want)
	}
	if entries[1].Seq != after+1 {
		t.Errorf("first result at %d, want right after %d", entries[1].Seq, after)
	}
}

// A result is recorded under the ID its call names, which the harness
// keys: a message stored first under the call's unkeyed ID, which anyone
// who saw the call's ID could make, takes nothing from it, and the ID is
// the same for the same call every time, so a result recorded again is
// still dropped.
func TestRecordResultUnderTheCallsID(t *testing.T) {
	t.Parallel()
	_, _, js := natstest.Run(t)
	ctx := context.Background()
	keyed := func(key string) *sessionlog.Log {
		return sessionlog.New(js, sessionlog.Options{As: sessionlog.Harness, Reader: "test", IDKey: []byte(key)})
	}
	harness, sandbox := keyed("k1"), newLog(js, sessionlog.Sandbox)
	s, c := uuid.Must(uuid.NewV7()), uuid.New()
	id := harness.ResultID("acme", s, c)
	if id == "" || id != keyed("k1").ResultID("acme", s, c) {
		t.Fatalf("result ID %q, and %q made again: want one, the same", id, keyed("k1").ResultID("acme", s, c))
	}
	for what, other := range map[string]string{
		"another key":     keyed("k2").ResultID("acme", s, c),
		"another call":    harness.ResultID("acme", s, uuid.New()),
		"another session": harness.ResultID("acme", uuid.Must(uuid.NewV7()), c),
		"another tenant":  harness.ResultID("initech", s, c),
	} {
		if other == id {
			t.Errorf("the result ID of %s is the same: %s", what, id)
		}
	}
	if got := newLog(js, sessionlog.Harness).ResultID("acme", s, c); got != "" {
		t.Errorf("a Log without a key made the result ID %q, want none", got)
	}
	if err := (&event.ToolCall{Call: c, ResultID: id}).CheckResultID(); err != nil {
		t.Errorf("the result ID does not check: %v", err)
	}

	if _, err := harness.Append(ctx, &event.ModelResponded{Header: event.NewHeader(event.TypeModelResponded, "acme", s), Turn: 1, Calls: []event.Call{{ID: c, Name: "Bash", Service: bus.ServiceSandbox}}}, "r1", 0); err != nil {
		t.Fatal(err)
	}
	if err := newLog(js, sessionlog.Approval).Record(ctx, &event.ApprovalDecided{Header: event.NewHeader(event.TypeApprovalDecided, "acme", s), Call: c}, c.String()+":result"); err != nil {
		t.Fatal(err)
	}
	call := &event.ToolCall{Call: c, ResultID: id}
	result := func(output string) *event.ToolCompleted {
		return &event.ToolCompleted{Header: event.NewHeader(event.TypeToolCompleted, "acme", s), Call: c, Name: "Bash", Output: output, Service: bus.ServiceSandbox}
	}
	for _, out := range []string{"one", "one again"} {
		if err := sandbox.RecordResult(ctx, result(out), call); err != nil {
			t.Fatal(err)
		}
	}
	entries, _, err := harness.ReadAll(ctx, "acme", s)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		if r, ok := e.Event.(*event.ToolCompleted); ok {
			got = append(got, r.Output)
		}
	}
	if !slices.Equal(got, []string{"one"}) {
		t.Errorf("results recorded %q, want the first alone", got)
	}
}

// A call a tool service gives up on is answered with an error result of
// that service, in the session its subject names; a call whose body names
// another session, or that the harness did not sign, is answered nowhere.
func TestGiveUpCall(t *testing.T) {
	t.Parallel()
	_, _, js := natstest.Run(t)
	ctx := context.Background()
	harness, sandbox := newLog(js, sessionlog.Harness), newLog(js, sessionlog.Sandbox)
	s, other := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	c := uuid.New()
	if err := harness.Record(ctx, &event.ModelResponded{Header: event.NewHeader(event.TypeModelResponded, "acme", s), Turn: 1, Calls: []event.Call{{ID: c, Name: "Bash", Service: bus.ServiceSandbox}}}, "r1"); err != nil {
		t.Fatal(err)
	}
	pub, key, _ := ed25519.GenerateKey(nil)
	_, otherKey, _ := ed25519.GenerateKey(nil)
	giveUp := sandbox.GiveUpCall(bus.ServiceSandbox, pub)
	signed := func(tenant string, session uuid.UUID, key ed25519.PrivateKey) bus.Msg {
		tc := &event.ToolCall{Header: event.NewHeader(event.TypeToolCall, tenant, session), Call: c, Name: "Bash"}
		tc.Sign(key, bus.ServiceSandbox)
		return bus.Msg{Subject: bus.ToolSubject(bus.ServiceSandbox, "acme", s), Data: encode(t, tc)}
	}
	call := func(tenant string, session uuid.UUID) bus.Msg { return signed(tenant, session, key) }
	for _, m := range []bus.Msg{call("evil", s), call("acme", other), signed("acme", s, otherKey), {Subject: "tools.sandbox.acme", Data: []byte(`{}`)}} {
		if err := giveUp(ctx, m, errors.New("boom")); err != nil {
			t.Errorf("giving up a call that names another session: %v", err)
		}
	}
	if err := giveUp(ctx, call("acme", s), errors.New("boom")); err != nil {
		t.Fatal(err)
	}
	entries, _, err := harness.ReadAll(ctx, "acme", s)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{event.TypeModelResponded, event.TypeToolCompleted}; !slices.Equal(types(entries), want) {
		t.Fatalf("read %v, want %v", types(entries), want)
	}
	r := entries[1].Event.(*event.ToolCompleted)
	if !r.IsError || r.Call != c || r.Service != bus.ServiceSandbox || !strings.Contains(r.Output, "boom") || entries[1].Writer != sessionlog.Sandbox {
		t.Errorf("result = %+v by %s, want the sandbox's error result of the call", r, entries[1].Writer)
	}
	if msgs, err := bus.ReadAll(ctx, js, bus.StreamEvents, bus.SessionEvents("*", other)); err != nil || len(msgs) != 0 {
		t.Errorf("the other session has %d events, %v; want none", len(msgs), err)
	}
	if msgs, err := bus.ReadAll(ctx, js, bus.StreamEvents, bus.SessionEvents("evil", s)); err != nil || len(msgs) != 0 {
		t.Errorf("evil's session has %d events, %v; want none", len(msgs), err)
	}
}

// With an IDKey, what the Log writes is under a keyed ID: not the one its
// caller gave, which another writer could take first, but the same each
// time, so that a write again is a duplicate still; and another key gives
// another.
func TestRecordKeyedIDs(t *testing.T) {
	t.Parallel()
	_, _, js := natstest.Run(t)
	ctx := context.Background()
	s := uuid.Must(uuid.NewV7())
	keyed := sessionlog.New(js, sessionlog.Options{As: sessionlog.Harness, IDKey: []byte("k1")})
	other := sessionlog.New(js, sessionlog.Options{As: sessionlog.Harness, IDKey: []byte("k2")})
	ev := func() event.Event {
		return &event.SessionFailed{Header: event.NewHeader(event.TypeSessionFailed, "acme", s), Code: "x", Reason: "y"}
	}
	if err := keyed.Record(ctx, ev(), "turn:1"); err != nil {
		t.Fatal(err)
	}
	if err := keyed.Record(ctx, ev(), "turn:1"); !errors.Is(err, sessionlog.ErrDuplicate) {
		t.Errorf("the same ID again: err = %v, want ErrDuplicate", err)
	}
	if err := other.Record(ctx, ev(), "turn:1"); err != nil {
		t.Errorf("the same ID under another key: %v, want it recorded", err)
	}
	raw, err := bus.ReadAll(ctx, js, bus.StreamEvents, bus.SessionEvents("acme", s))
	if err != nil || len(raw) != 2 {
		t.Fatalf("%d log messages, %v; want 2", len(raw), err)
	}
	prefix := bus.SessionKey("acme", s) + ":"
	for _, m := range raw {
		if !strings.HasPrefix(m.MsgID, prefix) || strings.Contains(m.MsgID, "turn:1") {
			t.Errorf("msg id %q: want the session's key and a keyed hash of turn:1", m.MsgID)
		}
	}
	if raw[0].MsgID == raw[1].MsgID {
		t.Errorf("two keys gave the same msg id %q", raw[0].MsgID)
	}
}
