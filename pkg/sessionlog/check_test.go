package sessionlog_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/sessionlog"
)

// allowed is who may write each kind of event, written out again here as
// the README states it, so that a change to the package's table must be
// made twice.
var allowed = map[string][]sessionlog.Writer{
	event.TypeSessionRequested:  {sessionlog.Harness},
	event.TypeModelResponded:    {sessionlog.Harness},
	event.TypeToolDispatched:    {sessionlog.Harness},
	event.TypeApprovalRequested: {sessionlog.Harness, sessionlog.Egress},
	event.TypeSessionCompleted:  {sessionlog.Harness},
	event.TypeSessionFailed:     {sessionlog.Harness},
	event.TypeToolCompleted:     {sessionlog.Harness, sessionlog.Sandbox, sessionlog.Memory},
	event.TypeApprovalDecided:   {sessionlog.Approval},
	event.TypeSessionStopped:    {sessionlog.Harness},
	event.TypeBudgetRaise:       {sessionlog.Harness},
	event.TypeSessionPaused:     {sessionlog.Harness},
	event.TypeSessionResumed:    {sessionlog.Harness},
	event.TypeContextCompacted:  {sessionlog.Harness},
}

// tokens are writer tokens a subject may carry: the services', a user's
// (clients write nothing to the logs) and nonsense.
var tokens = []sessionlog.Writer{
	sessionlog.Harness, sessionlog.Sandbox, sessionlog.Memory, sessionlog.Approval, sessionlog.Egress,
	sessionlog.Writer(bus.UserToken("alice")), "client", "auth", "",
}

// body returns a well-formed event of type typ of a session, as writer w
// would write it: a tool result names w as its service, or none when the
// harness writes it.
func body(typ, tenant string, session uuid.UUID, w sessionlog.Writer) event.Event {
	h := event.NewHeader(typ, tenant, session)
	call := uuid.New()
	switch typ {
	case event.TypeSessionRequested:
		return &event.SessionRequested{Header: h, Request: uuid.New(), User: "alice", Model: "anthropic:m", Prompt: "hi"}
	case event.TypeModelResponded:
		return &event.ModelResponded{Header: h, Turn: 1, Model: "anthropic:m", Calls: []event.Call{{ID: call, ToolUseID: "t1", Name: "Bash", Service: bus.ServiceSandbox}}}
	case event.TypeToolDispatched:
		return &event.ToolDispatched{Header: h, Call: call, Turn: 1, Name: "Bash", Service: bus.ServiceSandbox}
	case event.TypeApprovalRequested:
		tool := "Bash"
		if w == sessionlog.Egress {
			tool = event.EgressTool
		}
		return &event.ApprovalRequested{Header: h, Call: call, Turn: 1, User: "alice", Tool: tool, Input: json.RawMessage(`{}`), ArgsHash: "h", Rule: "r", Reason: "why"}
	case event.TypeSessionCompleted:
		return &event.SessionCompleted{Header: h, Answer: "done", Turns: 1}
	case event.TypeSessionFailed:
		return &event.SessionFailed{Header: h, Code: event.CodeModelError, Reason: "r"}
	case event.TypeToolCompleted:
		r := &event.ToolCompleted{Header: h, Call: call, Name: "Bash", Output: "ok"}
		if w != sessionlog.Harness {
			r.Service = string(w)
		}
		return r
	case event.TypeApprovalDecided:
		return &event.ApprovalDecided{Header: h, Call: call, ArgsHash: "h", Approved: true, Reviewer: "bob"}
	case event.TypeSessionStopped:
		return &event.SessionStopped{Header: h, By: "alice"}
	case event.TypeBudgetRaise:
		return &event.BudgetRaise{Header: h, Raise: uuid.New(), User: "alice", Limits: json.RawMessage(`{}`)}
	case event.TypeContextCompacted:
		return &event.ContextCompacted{Header: h, Turn: 3, ClearedThrough: 1, TokensBefore: 900, TokensAfter: 400}
	case event.TypeSessionPaused:
		return &event.SessionPaused{Header: h, Budget: "session.steps", Reason: "over", Resume: "corral raise"}
	case event.TypeSessionResumed:
		return &event.SessionResumed{Header: h, Raise: uuid.New(), Reviewer: "bob"}
	}
	panic("no body for " + typ)
}

func encode(t testing.TB, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// judge is ParseSubject then Check, as a reader judges a message.
func judge(subject string, data []byte) (sessionlog.Address, event.Event, error) {
	a, err := sessionlog.ParseSubject(subject)
	if err != nil {
		return a, nil, err
	}
	ev, err := sessionlog.Check(a, data)
	return a, ev, err
}

// Every kind of event is accepted from each writer of the table, and from
// no other token.
func TestCheckWriters(t *testing.T) {
	t.Parallel()
	var types []string
	for typ := range allowed {
		types = append(types, typ)
	}
	slices.Sort(types)
	if got := sessionlog.Types(); !slices.Equal(got, types) {
		t.Errorf("Types() = %v, want %v", got, types)
	}
	s := uuid.Must(uuid.NewV7())
	for _, typ := range types {
		var want []string
		for _, w := range allowed[typ] {
			want = append(want, string(w))
		}
		if got := sessionlog.Writers(typ); !slices.Equal(got, want) {
			t.Errorf("Writers(%s) = %v, want %v", typ, got, want)
		}
		for _, w := range tokens {
			subject := sessionlog.Subject("acme", s, typ, w)
			ev := body(typ, "acme", s, w)
			a, got, err := judge(subject, encode(t, ev))
			if !slices.Contains(allowed[typ], w) {
				if r := sessionlog.ReasonOf(err); r != sessionlog.ReasonWriter {
					t.Errorf("%s by %q: reason %q (%v), want %q", typ, w, r, err, sessionlog.ReasonWriter)
				}
				continue
			}
			if err != nil {
				t.Errorf("%s by %q: %v, want it accepted", typ, w, err)
				continue
			}
			want := sessionlog.Address{Tenant: "acme", Session: s, Type: typ, Writer: w}
			if a != want {
				t.Errorf("%s by %q: address %+v, want %+v", typ, w, a, want)
			}
			if h := got.Head(); h.Type != typ || h.ID != ev.Head().ID {
				t.Errorf("%s by %q: checked event %T %+v, want the one written", typ, w, got, h)
			}
		}
	}
	if got := sessionlog.Writers(event.TypeToolCall); len(got) != 0 {
		t.Errorf("Writers(%s) = %v, want none: not a session event", event.TypeToolCall, got)
	}
}

// An event is judged by its subject: a body that says something else, a
// writer that may not write it, and subjects of any other shape are
// rejected, each for its reason.
func TestCheckRejects(t *testing.T) {
	t.Parallel()
	s, other := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	subject := func(typ string, w sessionlog.Writer) string { return sessionlog.Subject("acme", s, typ, w) }
	data := func(typ string, w sessionlog.Writer) []byte { return encode(t, body(typ, "acme", s, w)) }
	result := func(service string) []byte {
		r := body(event.TypeToolCompleted, "acme", s, sessionlog.Harness).(*event.ToolCompleted)
		r.Service = service
		return encode(t, r)
	}
	stub := encode(t, &event.Offloaded{Header: event.NewHeader(event.TypeOffloaded, "acme", s), Of: event.TypeSessionFailed, Object: "sha256-" + strings.Repeat("0", 64), Size: 10})
	failed := "events.acme." + s.String() + ".session.failed.harness"
	user := sessionlog.Writer(bus.UserToken("alice"))
	tests := []struct {
		name    string
		subject string
		data    []byte
		reason  string
	}{
		{"good", failed, data(event.TypeSessionFailed, sessionlog.Harness), ""},
		{"good tool result", subject(event.TypeToolCompleted, sessionlog.Memory), data(event.TypeToolCompleted, sessionlog.Memory), ""},

		{"wrong type for the subject", subject(event.TypeSessionCompleted, sessionlog.Harness), data(event.TypeSessionFailed, sessionlog.Harness), sessionlog.ReasonType},
		{"a stub not resolved", failed, stub, sessionlog.ReasonType},
		{"no type", failed, []byte(`{"tenant":"acme"}`), sessionlog.ReasonType},
		{"body of another tenant", failed, encode(t, body(event.TypeSessionFailed, "evil", s, sessionlog.Harness)), sessionlog.ReasonTenant},
		{"body of another session", failed, encode(t, body(event.TypeSessionFailed, "acme", other, sessionlog.Harness)), sessionlog.ReasonSession},
		{"body without tenant", failed, []byte(`{"type":"corral.session.v1.failed","session":"` + s.String() + `"}`), sessionlog.ReasonTenant},
		{"undecodable", failed, []byte(`{not json`), sessionlog.ReasonUndecodable},
		{"a field of the wrong type", failed, []byte(`{"type":"corral.session.v1.failed","code":5}`), sessionlog.ReasonUndecodable},

		{"a client writing model.responded", subject(event.TypeModelResponded, user), data(event.TypeModelResponded, user), sessionlog.ReasonWriter},
		{"a client writing session.stopped", subject(event.TypeSessionStopped, user), data(event.TypeSessionStopped, user), sessionlog.ReasonWriter},
		{"a client writing budget.raise", subject(event.TypeBudgetRaise, user), data(event.TypeBudgetRaise, user), sessionlog.ReasonWriter},
		{"sandbox writing approval.decided", subject(event.TypeApprovalDecided, sessionlog.Sandbox), data(event.TypeApprovalDecided, sessionlog.Sandbox), sessionlog.ReasonWriter},
		{"approval writing session.requested", subject(event.TypeSessionRequested, sessionlog.Approval), data(event.TypeSessionRequested, sessionlog.Approval), sessionlog.ReasonWriter},
		{"memory writing a sandbox result", subject(event.TypeToolCompleted, sessionlog.Memory), result(bus.ServiceSandbox), sessionlog.ReasonService},
		{"sandbox writing a result of no service", subject(event.TypeToolCompleted, sessionlog.Sandbox), result(""), sessionlog.ReasonService},
		{"harness writing a result with a service", subject(event.TypeToolCompleted, sessionlog.Harness), result(bus.ServiceSandbox), sessionlog.ReasonService},

		{"5 tokens", "events.acme." + s.String() + ".session.failed", data(event.TypeSessionFailed, sessionlog.Harness), sessionlog.ReasonSubject},
		{"7 tokens", failed + ".more", data(event.TypeSessionFailed, sessionlog.Harness), sessionlog.ReasonSubject},
		{"not events", "requests.acme." + s.String() + ".session.failed.harness", data(event.TypeSessionFailed, sessionlog.Harness), sessionlog.ReasonSubject},
		{"upper-case tenant", "events.ACME." + s.String() + ".session.failed.harness", encode(t, body(event.TypeSessionFailed, "ACME", s, sessionlog.Harness)), sessionlog.ReasonSubject},
		{"wildcard tenant", "events.*." + s.String() + ".session.failed.harness", encode(t, body(event.TypeSessionFailed, "*", s, sessionlog.Harness)), sessionlog.ReasonSubject},
		{"empty tenant", "events.." + s.String() + ".session.failed.harness", encode(t, body(event.TypeSessionFailed, "", s, sessionlog.Harness)), sessionlog.ReasonSubject},
		{"non-UUID session", "events.acme.not-a-session.session.failed.harness", data(event.TypeSessionFailed, sessionlog.Harness), sessionlog.ReasonSubject},
		{"session in upper case", "events.acme." + strings.ToUpper(s.String()) + ".session.failed.harness", data(event.TypeSessionFailed, sessionlog.Harness), sessionlog.ReasonSubject},
		{"session without dashes", "events.acme." + strings.ReplaceAll(s.String(), "-", "") + ".session.failed.harness", data(event.TypeSessionFailed, sessionlog.Harness), sessionlog.ReasonSubject},
		{"session as a URN", "events.acme.urn:uuid:" + s.String() + ".session.failed.harness", data(event.TypeSessionFailed, sessionlog.Harness), sessionlog.ReasonSubject},
		{"unknown kind", "events.acme." + s.String() + ".session.exploded.harness", data(event.TypeSessionFailed, sessionlog.Harness), sessionlog.ReasonSubject},
		{"a tool call is not a session event", "events.acme." + s.String() + ".tool.call.harness", encode(t, &event.ToolCall{Header: event.NewHeader(event.TypeToolCall, "acme", s), Call: uuid.New()}), sessionlog.ReasonSubject},
		{"a stub's own type", "events.acme." + s.String() + ".bus.offloaded.harness", stub, sessionlog.ReasonSubject},
		{"a request is not a session event", "events.acme." + s.String() + ".session.request.harness", data(event.TypeSessionRequested, sessionlog.Harness), sessionlog.ReasonSubject},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, ev, err := judge(tc.subject, tc.data)
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("rejected: %v", err)
				}
				return
			}
			if got := sessionlog.ReasonOf(err); got != tc.reason {
				t.Fatalf("reason = %q (err %v, event %+v), want %q", got, err, ev, tc.reason)
			}
			if !errorsIsRejected(err) {
				t.Errorf("%v does not match ErrRejected", err)
			}
		})
	}
}

// Egress asks about its held requests alone, under the egress tool, and no
// one else asks under that tool.
func TestCheckApprovalRequestTool(t *testing.T) {
	t.Parallel()
	s := uuid.Must(uuid.NewV7())
	for _, tc := range []struct {
		w    sessionlog.Writer
		tool string
		ok   bool
	}{
		{sessionlog.Harness, "Bash", true},
		{sessionlog.Harness, event.EgressTool, false},
		{sessionlog.Egress, event.EgressTool, true},
		{sessionlog.Egress, "Bash", false},
	} {
		ev := &event.ApprovalRequested{Header: event.NewHeader(event.TypeApprovalRequested, "acme", s), Call: uuid.New(), Tool: tc.tool, Input: json.RawMessage(`{}`)}
		data, _ := json.Marshal(ev)
		a, err := sessionlog.ParseSubject(sessionlog.Subject("acme", s, event.TypeApprovalRequested, tc.w))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sessionlog.Check(a, data); (err == nil) != tc.ok {
			t.Errorf("%s asking about %s: %v, want accepted %v", tc.w, tc.tool, err, tc.ok)
		}
	}
}
