package sessionlog_test

import (
	"errors"
	"testing"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/sessionlog"
)

// The call that prepares a workspace is the first request's: its dispatch
// and the sandbox's result are admitted as a response's calls are, and a
// follow-up naming one makes no call of it.
func TestAdmitPrepareCall(t *testing.T) {
	s := uuid.Must(uuid.NewV7())
	prepare, later := uuid.New(), uuid.New()
	h := func(typ string) event.Header { return event.NewHeader(typ, "acme", s) }
	at := func(typ string, w sessionlog.Writer) sessionlog.Address {
		return sessionlog.Address{Tenant: "acme", Session: s, Type: typ, Writer: w}
	}
	sess := sessionlog.NewSession("acme", s)
	for i, step := range []struct {
		a    sessionlog.Address
		ev   event.Event
		want error
	}{
		{at(event.TypeSessionRequested, sessionlog.Harness), &event.SessionRequested{Header: h(event.TypeSessionRequested), User: "ada", Prepare: prepare}, nil},
		{at(event.TypeSessionRequested, sessionlog.Harness), &event.SessionRequested{Header: h(event.TypeSessionRequested), User: "ada", Prepare: later}, nil},
		{at(event.TypeToolCompleted, sessionlog.Sandbox), &event.ToolCompleted{Header: h(event.TypeToolCompleted), Call: prepare, Name: event.PrepareTool, Service: bus.ServiceSandbox}, sessionlog.ErrRejected},
		{at(event.TypeToolDispatched, sessionlog.Harness), &event.ToolDispatched{Header: h(event.TypeToolDispatched), Call: prepare, Name: event.PrepareTool, Service: bus.ServiceSandbox}, nil},
		{at(event.TypeToolCompleted, sessionlog.Memory), &event.ToolCompleted{Header: h(event.TypeToolCompleted), Call: prepare, Name: event.PrepareTool, Service: bus.ServiceMemory}, sessionlog.ErrRejected},
		{at(event.TypeToolCompleted, sessionlog.Sandbox), &event.ToolCompleted{Header: h(event.TypeToolCompleted), Call: prepare, Name: event.PrepareTool, Service: bus.ServiceSandbox}, nil},
		{at(event.TypeToolDispatched, sessionlog.Harness), &event.ToolDispatched{Header: h(event.TypeToolDispatched), Call: later, Name: event.PrepareTool, Service: bus.ServiceSandbox}, sessionlog.ErrRejected},
	} {
		err := sess.Admit(step.a, step.ev)
		if (err == nil) != (step.want == nil) || step.want != nil && !errors.Is(err, step.want) {
			t.Errorf("step %d (%s by %s): %v, want %v", i, step.a.Type, step.a.Writer, err, step.want)
		}
	}
}
