package sessionlog

import (
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
)

// Writer is the last token of an event's subject: who wrote it, one of
// the services. Clients write nothing to the session logs: they publish
// requests (prompts, stops, raises) under their own tenant and user, and the
// harness records what it accepts.
type Writer string

// The services' writer tokens.
const (
	Harness  Writer = "harness"
	Sandbox  Writer = bus.ServiceSandbox
	Memory   Writer = bus.ServiceMemory
	Approval Writer = "approval"
	Egress   Writer = "egress"
)

// writers says who may write each kind of event: the table of the README's
// "Who may write what", and of deploy/nats.conf.
var writers = map[string][]Writer{
	event.TypeSessionRequested: {Harness},
	event.TypeModelResponded:   {Harness},
	event.TypeToolDispatched:   {Harness},
	// The egress service asks about the requests it holds (a git push).
	event.TypeApprovalRequested: {Harness, Egress},
	event.TypeSessionCompleted:  {Harness},
	event.TypeSessionFailed:     {Harness},
	// The harness records the results of calls it refused itself.
	event.TypeToolCompleted:   {Harness, Sandbox, Memory},
	event.TypeApprovalDecided: {Approval},
	// Asked for by the session's user (or a bot or reviewer speaking for
	// that user) in a request; recorded by the harness.
	event.TypeSessionStopped: {Harness},
	event.TypeBudgetRaise:    {Harness},
	// A session over a budget pauses, and goes on after a raise.
	event.TypeSessionPaused:  {Harness},
	event.TypeSessionResumed: {Harness},
	// Made before the model is asked, as the model's responses are.
	event.TypeContextCompacted: {Harness},
}

// Writers returns who may write events of type typ. It is empty for a type
// that is not a session event.
func Writers(typ string) []string {
	var out []string
	for _, w := range writers[typ] {
		out = append(out, string(w))
	}
	return out
}

// Types returns every session event type, sorted.
func Types() []string {
	out := make([]string, 0, len(writers))
	for t := range writers {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// mayWrite reports whether w may write events of type typ.
func mayWrite(w Writer, typ string) bool {
	return slices.Contains(writers[typ], w)
}

// Subject is where writer w records an event of type typ of a session.
func Subject(tenant string, session uuid.UUID, typ string, w Writer) string {
	return fmt.Sprintf("events.%s.%s.%s.%s", tenant, session, event.Kind(typ), w)
}

// KindFilter matches the events of type typ of every session, whoever
// wrote them.
func KindFilter(typ string) string {
	return fmt.Sprintf("events.*.*.%s.*", event.Kind(typ))
}

// SessionKind matches a session's events of type typ, whoever wrote them.
func SessionKind(tenant string, session uuid.UUID, typ string) string {
	return fmt.Sprintf("events.%s.%s.%s.*", tenant, session, event.Kind(typ))
}

// Address is what an event's subject says of it.
type Address struct {
	Tenant  string
	Session uuid.UUID
	// Type is the event type the subject names.
	Type   string
	Writer Writer
}

// ParseSubject reads an event's subject. It fails for a subject that is
// not events.<tenant>.<session>.<domain>.<name>.<writer> with a valid
// tenant, a session ID, a session event type and a writer token.
func ParseSubject(subject string) (Address, error) {
	tok := strings.Split(subject, ".")
	if len(tok) != 6 || tok[0] != "events" {
		return Address{}, reject(ReasonSubject, "subject %q is not events.<tenant>.<session>.<domain>.<name>.<writer>", subject)
	}
	if err := event.CheckTenant(tok[1]); err != nil {
		return Address{}, reject(ReasonSubject, "subject %q: %v", subject, err)
	}
	// Only the canonical form: uuid.Parse also takes 32 bare hex digits,
	// upper case, braces and a urn: prefix, which name the same session on
	// a subject none of its readers (bus.SessionEvents) looks at.
	id, err := uuid.Parse(tok[2])
	if err != nil || id.String() != tok[2] {
		return Address{}, reject(ReasonSubject, "subject %q names no session", subject)
	}
	typ := "corral." + tok[3] + ".v1." + tok[4]
	if _, ok := writers[typ]; !ok {
		return Address{}, reject(ReasonSubject, "subject %q names no session event type", subject)
	}
	return Address{Tenant: tok[1], Session: id, Type: typ, Writer: Writer(tok[5])}, nil
}
