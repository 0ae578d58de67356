package sessionlog_test

import (
	"errors"
	"testing"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/sessionlog"
)

// step is one event of a session's log, as the writer w wrote it.
type step struct {
	w  sessionlog.Writer
	ev event.Event
}

// A session's state judges each event by what came before it: a tool
// result only for a call dispatched to its writer (or, from the harness,
// for a call of a response), a dispatch only for a call of a response.
func TestAdmit(t *testing.T) {
	t.Parallel()
	s := uuid.Must(uuid.NewV7())
	h := func(typ string) event.Header { return event.NewHeader(typ, "acme", s) }
	c1, c2, c3 := uuid.New(), uuid.New(), uuid.New()
	requested := step{sessionlog.Harness, &event.SessionRequested{Header: h(event.TypeSessionRequested), User: "alice", Prompt: "hi"}}
	// c1 goes to the sandbox with the response, c2 is held for a
	// reviewer, c3 goes to memory.
	responded := step{sessionlog.Harness, &event.ModelResponded{Header: h(event.TypeModelResponded), Turn: 1, Calls: []event.Call{
		{ID: c1, Name: "Bash", Service: bus.ServiceSandbox},
		{ID: c2, Name: "Bash"},
		{ID: c3, Name: "Read", Service: bus.ServiceMemory},
	}}}
	result := func(w sessionlog.Writer, call uuid.UUID) step {
		r := &event.ToolCompleted{Header: h(event.TypeToolCompleted), Call: call, Name: "Bash", Output: "ok"}
		if w != sessionlog.Harness {
			r.Service = string(w)
		}
		return step{w, r}
	}
	dispatched := func(call uuid.UUID, service string) step {
		return step{sessionlog.Harness, &event.ToolDispatched{Header: h(event.TypeToolDispatched), Call: call, Name: "Bash", Service: service}}
	}
	stopped := step{sessionlog.Harness, &event.SessionStopped{Header: h(event.TypeSessionStopped), By: "alice"}}
	tests := []struct {
		name   string
		before []step
		last   step
		reason string // "" when accepted
	}{
		{"request", nil, requested, ""},
		{"sandbox result of a call dispatched with the response", []step{requested, responded}, result(sessionlog.Sandbox, c1), ""},
		{"memory result of a call dispatched with the response", []step{requested, responded}, result(sessionlog.Memory, c3), ""},
		{"result of a call dispatched later", []step{requested, responded, dispatched(c2, bus.ServiceSandbox)}, result(sessionlog.Sandbox, c2), ""},
		{"harness result of a call held", []step{requested, responded}, result(sessionlog.Harness, c2), ""},
		{"harness result of a call dispatched", []step{requested, responded}, result(sessionlog.Harness, c1), ""},
		{"dispatch of a call of a response", []step{requested, responded}, dispatched(c2, bus.ServiceSandbox), ""},

		{"result of a call not dispatched", []step{requested, responded}, result(sessionlog.Sandbox, c2), sessionlog.ReasonNotDispatch},
		{"memory result of a call dispatched to the sandbox", []step{requested, responded}, result(sessionlog.Memory, c1), sessionlog.ReasonNotDispatch},
		{"sandbox result of a call dispatched to memory", []step{requested, responded}, result(sessionlog.Sandbox, c3), sessionlog.ReasonNotDispatch},
		{"result of a call no response made", []step{requested, responded}, result(sessionlog.Sandbox, uuid.New()), sessionlog.ReasonNotDispatch},
		{"harness result of a call no response made", []step{requested, responded}, result(sessionlog.Harness, uuid.New()), sessionlog.ReasonNotDispatch},
		{"result before any response", []step{requested}, result(sessionlog.Sandbox, c1), sessionlog.ReasonNotDispatch},
		{"dispatch of a call no response made", []step{requested, responded}, dispatched(uuid.New(), bus.ServiceSandbox), sessionlog.ReasonNotDispatch},
		{"result of a call dispatched elsewhere since", []step{requested, responded, dispatched(c2, bus.ServiceMemory)}, result(sessionlog.Sandbox, c2), sessionlog.ReasonNotDispatch},

		// The harness records a stop once it has checked that the
		// request's user is the session's: the log trusts its writer.
		{"stop recorded by the harness", []step{requested, responded}, stopped, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sess := sessionlog.NewSession("acme", s)
			for i, st := range append(tc.before, tc.last) {
				a := sessionlog.Address{Tenant: "acme", Session: s, Type: st.ev.Head().Type, Writer: st.w}
				err := sess.Admit(a, st.ev)
				if i < len(tc.before) {
					if err != nil {
						t.Fatalf("event %d (%s by %s): %v", i, a.Type, a.Writer, err)
					}
					continue
				}
				if got := sessionlog.ReasonOf(err); got != tc.reason {
					t.Fatalf("reason = %q (%v), want %q", got, err, tc.reason)
				}
				if err != nil && !errorsIsRejected(err) {
					t.Errorf("%v does not match ErrRejected", err)
				}
			}
		})
	}
}

// A session's user is its first request's; a rejected event teaches the
// session nothing; a clone shares nothing mutable with its original.
func TestSessionState(t *testing.T) {
	t.Parallel()
	s := uuid.Must(uuid.NewV7())
	h := func(typ string) event.Header { return event.NewHeader(typ, "acme", s) }
	admit := func(sess *sessionlog.Session, w sessionlog.Writer, ev event.Event) error {
		t.Helper()
		return sess.Admit(sessionlog.Address{Tenant: "acme", Session: s, Type: ev.Head().Type, Writer: w}, ev)
	}
	sess := sessionlog.NewSession("acme", s)
	if sess.User() != "" {
		t.Errorf("user before any request = %q, want none", sess.User())
	}
	for _, user := range []string{"alice", "mallory"} {
		if err := admit(sess, sessionlog.Harness, &event.SessionRequested{Header: h(event.TypeSessionRequested), User: user}); err != nil {
			t.Fatal(err)
		}
	}
	if sess.User() != "alice" {
		t.Errorf("user = %q, want the first request's, alice", sess.User())
	}

	c := uuid.New()
	if err := admit(sess, sessionlog.Harness, &event.ModelResponded{Header: h(event.TypeModelResponded), Calls: []event.Call{{ID: c, Name: "Bash"}}}); err != nil {
		t.Fatal(err)
	}
	// A dispatch of another call, rejected, leaves it unknown.
	other := uuid.New()
	if err := admit(sess, sessionlog.Harness, &event.ToolDispatched{Header: h(event.TypeToolDispatched), Call: other, Service: bus.ServiceSandbox}); err == nil {
		t.Fatal("a dispatch of a call no response made was admitted")
	}
	sandboxResult := func(call uuid.UUID) *event.ToolCompleted {
		return &event.ToolCompleted{Header: h(event.TypeToolCompleted), Call: call, Service: bus.ServiceSandbox}
	}
	if err := admit(sess, sessionlog.Sandbox, sandboxResult(other)); err == nil {
		t.Error("a result of a call whose dispatch was rejected was admitted")
	}

	clone := sess.Clone()
	if err := admit(clone, sessionlog.Harness, &event.ToolDispatched{Header: h(event.TypeToolDispatched), Call: c, Service: bus.ServiceSandbox}); err != nil {
		t.Fatal(err)
	}
	if err := admit(clone, sessionlog.Sandbox, sandboxResult(c)); err != nil {
		t.Errorf("the clone, which saw the dispatch: %v", err)
	}
	if err := admit(sess, sessionlog.Sandbox, sandboxResult(c)); err == nil {
		t.Error("the original learnt of a dispatch only its clone saw")
	}
	if clone.User() != "alice" || clone.Tenant != "acme" || clone.ID != s {
		t.Errorf("clone = %s/%s of %q, want acme/%s of alice", clone.Tenant, clone.ID, clone.User(), s)
	}
}

// An event stored twice (a stored copy of another message, say) is folded
// once.
func TestAdmitRefusesReplays(t *testing.T) {
	s := sessionlog.NewSession("acme", uuid.Must(uuid.NewV7()))
	req := &event.SessionRequested{Header: event.NewHeader(event.TypeSessionRequested, "acme", s.ID), User: "ada"}
	a := sessionlog.Address{Tenant: "acme", Session: s.ID, Type: event.TypeSessionRequested, Writer: sessionlog.Harness}
	if err := s.Admit(a, req); err != nil {
		t.Fatal(err)
	}
	if err := s.Admit(a, req); sessionlog.ReasonOf(err) != sessionlog.ReasonReplayed {
		t.Errorf("the same event again: %v, want %s", err, sessionlog.ReasonReplayed)
	}
}

// An event the reader wrote itself and admitted before learning where it
// was stored is passed over once when read back, where it was written:
// neither folded again nor taken for a replay. A second copy, or a copy at
// another address, is a replay.
func TestAdmitUnplaced(t *testing.T) {
	s := sessionlog.NewSession("acme", uuid.Must(uuid.NewV7()))
	at := func(typ string, w sessionlog.Writer) sessionlog.Address {
		return sessionlog.Address{Tenant: "acme", Session: s.ID, Type: typ, Writer: w}
	}
	req := &event.SessionRequested{Header: event.NewHeader(event.TypeSessionRequested, "acme", s.ID), User: "ada"}
	if err := s.Admit(at(event.TypeSessionRequested, sessionlog.Harness), req); err != nil {
		t.Fatal(err)
	}
	resp := &event.ModelResponded{Header: event.NewHeader(event.TypeModelResponded, "acme", s.ID), Turn: 1}
	a := at(event.TypeModelResponded, sessionlog.Harness)
	if err := s.AdmitUnplaced(a, resp); err != nil {
		t.Fatal(err)
	}
	clone := s.Clone()
	for name, s := range map[string]*sessionlog.Session{"the session": s, "its clone": clone} {
		if err := s.Admit(at(event.TypeModelResponded, sessionlog.Sandbox), resp); sessionlog.ReasonOf(err) != sessionlog.ReasonReplayed {
			t.Errorf("%s: the event read back from another writer: %v, want %s", name, err, sessionlog.ReasonReplayed)
		}
		err := s.Admit(a, resp)
		if !errors.Is(err, sessionlog.ErrFolded) || errors.Is(err, sessionlog.ErrRejected) {
			t.Errorf("%s: the event read back where it was written: %v, want ErrFolded alone", name, err)
		}
		if err := s.Admit(a, resp); sessionlog.ReasonOf(err) != sessionlog.ReasonReplayed {
			t.Errorf("%s: the event read back twice: %v, want %s", name, err, sessionlog.ReasonReplayed)
		}
	}
}
