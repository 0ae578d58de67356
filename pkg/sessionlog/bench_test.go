package sessionlog_test

import (
	"encoding/json"
	"testing"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/model"
	"corral.dev/pkg/sessionlog"
)

// benchLog returns the messages of one session's log as the services
// write it in BenchmarkStepRoundTrip (services/corral): the request, steps
// model responses each with one Bash call dispatched to the sandbox and
// that call's result, and the answer.
func benchLog(b *testing.B, steps int) []bus.Msg {
	b.Helper()
	const tenant, user = "acme", "ada"
	session := uuid.Must(uuid.NewV7())
	var msgs []bus.Msg
	add := func(w sessionlog.Writer, ev event.Event) {
		data, err := json.Marshal(ev)
		if err != nil {
			b.Fatal(err)
		}
		h := ev.Head()
		msgs = append(msgs, bus.Msg{Subject: sessionlog.Subject(tenant, session, h.Type, w), Data: data, StreamSeq: uint64(len(msgs) + 1)})
	}
	h := func(typ string) event.Header { return event.NewHeader(typ, tenant, session) }
	add(sessionlog.Harness, &event.SessionRequested{Header: h(event.TypeSessionRequested), Request: uuid.Must(uuid.NewV7()), User: user, Model: "openai:gpt-5", Prompt: "run the tests"})
	input := json.RawMessage(`{"command":"true"}`)
	for turn := 1; turn <= steps; turn++ {
		call, useID := uuid.Must(uuid.NewV7()), "call_"+uuid.NewString()[:8]
		add(sessionlog.Harness, &event.ModelResponded{
			Header: h(event.TypeModelResponded), Turn: turn, Model: "openai:gpt-5",
			Content:    []model.Block{{Type: model.ToolUseBlock, ID: useID, Name: "Bash", Input: input}},
			StopReason: "tool_calls", Usage: model.Usage{InputTokens: 3000 + 100*turn, OutputTokens: 20},
			Calls: []event.Call{{ID: call, ToolUseID: useID, Name: "Bash", Service: bus.ServiceSandbox}}, User: user,
		})
		exit := 0
		add(sessionlog.Sandbox, &event.ToolCompleted{
			Header: h(event.TypeToolCompleted), Call: call, Name: "Bash", ExitCode: &exit, DurationMS: 1,
			Service: bus.ServiceSandbox, User: user, After: uint64(len(msgs)),
		})
	}
	add(sessionlog.Harness, &event.SessionCompleted{Header: h(event.TypeSessionCompleted), Answer: "done", Turns: steps + 1, Usage: model.Usage{InputTokens: 70000, OutputTokens: 420}})
	return msgs
}

// BenchmarkJudge measures what judging an event read from a session log
// costs, per event, next to decoding it alone (event.Parse), the baseline
// any reader pays: over the events of a 20-step session's log, one after
// the other.
//
//   - parse: event.Parse, no check;
//   - judge: [sessionlog.Log.Judge], what every read does: the subject
//     parsed, the body looked at for a stub, the writer checked against
//     the type, the body decoded and its type, tenant and session checked
//     against the subject's, a result's service against its writer;
//   - fold: judge and [sessionlog.Log.Admit], as a reader folding the
//     whole session does (the harness, the sandbox-manager's look-up of a
//     result), a result checked against the call's dispatch and no event
//     folded twice; a new session is started each time the log is done.
//
// The log holds no stub, so judging reads nothing from the server: the
// Log needs no connection.
func BenchmarkJudge(b *testing.B) {
	msgs := benchLog(b, 20)
	l := sessionlog.New(nil, sessionlog.Options{Reader: "bench"})
	b.Run("parse", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := event.Parse(msgs[i].Data); err != nil {
				b.Fatal(err)
			}
			i = (i + 1) % len(msgs)
		}
	})
	b.Run("judge", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := l.Judge(b.Context(), msgs[i]); err != nil {
				b.Fatal(err)
			}
			i = (i + 1) % len(msgs)
		}
	})
	b.Run("fold", func(b *testing.B) {
		b.ReportAllocs()
		a, err := sessionlog.ParseSubject(msgs[0].Subject)
		if err != nil {
			b.Fatal(err)
		}
		var s *sessionlog.Session
		i := 0
		for b.Loop() {
			if i == 0 {
				s = sessionlog.NewSession(a.Tenant, a.Session)
			}
			e, err := l.Judge(b.Context(), msgs[i])
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Admit(b.Context(), s, e, msgs[i].Data); err != nil {
				b.Fatal(err)
			}
			i = (i + 1) % len(msgs)
		}
	})
}
