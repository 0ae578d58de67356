package sessionlog_test

import (
	"strings"
	"testing"

	"github.com/google/uuid"

	"corral.dev/pkg/event"
	"corral.dev/pkg/sessionlog"
)

// FuzzCheck judges a raw message on a subject as a reader does
// (ParseSubject, then Check) and checks that an event accepted is what its
// subject says: the subject in its one canonical form, a body of the type
// the subject names, of its tenant and session, by a writer allowed to
// write that type.
func FuzzCheck(f *testing.F) {
	s := uuid.MustParse("0196a3b4-7c2d-7e8f-9a0b-1c2d3e4f5a6b")
	for _, typ := range sessionlog.Types() {
		for _, w := range sessionlog.Writers(typ) {
			data := encode(f, body(typ, "acme", s, sessionlog.Writer(w)))
			f.Add(sessionlog.Subject("acme", s, typ, sessionlog.Writer(w)), data)
			// The same body on another kind's subject, another tenant's.
			f.Add(sessionlog.Subject("acme", s, event.TypeSessionCompleted, sessionlog.Harness), data)
			f.Add(sessionlog.Subject("initech", s, typ, sessionlog.Writer(w)), data)
		}
	}
	f.Add("events.acme."+strings.ToUpper(s.String())+".session.completed.harness", []byte(`{"type":"corral.session.v1.completed"}`))
	f.Fuzz(func(t *testing.T, subject string, data []byte) {
		a, err := sessionlog.ParseSubject(subject)
		if err != nil {
			if sessionlog.ReasonOf(err) != sessionlog.ReasonSubject {
				t.Fatalf("ParseSubject(%q): %v, want a %s rejection", subject, err, sessionlog.ReasonSubject)
			}
			return
		}
		if got := sessionlog.Subject(a.Tenant, a.Session, a.Type, a.Writer); got != subject {
			t.Fatalf("ParseSubject(%q) = %+v, whose subject is %q", subject, a, got)
		}
		ev, err := sessionlog.Check(a, data)
		if err != nil {
			if sessionlog.ReasonOf(err) == "" || ev != nil {
				t.Fatalf("Check(%+v, %q) = %v, %v: want a rejection alone", a, data, ev, err)
			}
			return
		}
		h := ev.Head()
		switch {
		case h.Type != a.Type || event.Kind(h.Type) != event.Kind(a.Type):
			t.Fatalf("Check accepted a %q body on %q", h.Type, subject)
		case h.Tenant != a.Tenant || h.Session != a.Session:
			t.Fatalf("Check accepted a body of %s/%s on %q", h.Tenant, h.Session, subject)
		}
		writers := sessionlog.Writers(a.Type)
		allowed := false
		for _, w := range writers {
			allowed = allowed || w == string(a.Writer)
		}
		if !allowed {
			t.Fatalf("Check accepted %s from %q, which only %v may write", a.Type, a.Writer, writers)
		}
		if c, ok := ev.(*event.ToolCompleted); ok && a.Writer != sessionlog.Harness && c.Service != string(a.Writer) {
			t.Fatalf("Check accepted a result of service %q from %q", c.Service, a.Writer)
		}
	})
}
