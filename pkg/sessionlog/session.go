package sessionlog

import (
	"errors"
	"maps"

	"github.com/google/uuid"

	"corral.dev/pkg/event"
)

// Session is what a reader folding one session's log from its start must
// know to judge the session's next event: whose session it is, and which
// calls the harness dispatched to which service. The zero value is not
// ready; use [NewSession].
type Session struct {
	Tenant string
	ID     uuid.UUID
	user   string
	// calls holds every call of a recorded response: the service it was
	// dispatched to, or "" while it was not.
	calls map[uuid.UUID]Writer
	// seen holds the IDs of the events admitted: an event stored twice
	// (a stored copy of another, say) is not folded twice.
	seen map[uuid.UUID]bool
	// unplaced holds the events the reader wrote and admitted itself
	// without learning where the log stored them ([Session.AdmitUnplaced]),
	// at the addresses they were written to.
	unplaced map[uuid.UUID]Address
}

// NewSession returns the state of a session whose log was not read yet.
func NewSession(tenant string, id uuid.UUID) *Session {
	return &Session{Tenant: tenant, ID: id, calls: make(map[uuid.UUID]Writer), seen: make(map[uuid.UUID]bool), unplaced: make(map[uuid.UUID]Address)}
}

// User is the session's user, as its first request said; "" before it.
func (s *Session) User() string { return s.user }

// Clone returns a copy of s that shares nothing mutable with it.
func (s *Session) Clone() *Session {
	c := *s
	c.calls = maps.Clone(s.calls)
	c.seen = maps.Clone(s.seen)
	c.unplaced = maps.Clone(s.unplaced)
	return &c
}

// Admit judges ev, an event of s's session that [Check] accepted at a, by
// what came before it in the log, and learns from it when it is accepted:
// a tool result from a tool service must be for a call the harness
// dispatched to that service; one from the harness, for a call of a
// recorded response.
//
// Errors match [ErrRejected], but for [ErrFolded].
func (s *Session) Admit(a Address, ev event.Event) error {
	if at, ok := s.unplaced[ev.Head().ID]; ok && at == a {
		delete(s.unplaced, ev.Head().ID)
		return ErrFolded
	}
	if err := s.admit(a, ev); err != nil {
		return err
	}
	s.seen[ev.Head().ID] = true
	return nil
}

// AdmitUnplaced is [Session.Admit] for an event the reader wrote itself,
// at a, and folds in before it knows where the log stored it (a write made
// without the condition that it follow what the reader read last). When
// it is read back, at the same address, Admit passes over it once with
// [ErrFolded]: it is neither folded again nor rejected as a replay.
func (s *Session) AdmitUnplaced(a Address, ev event.Event) error {
	if err := s.Admit(a, ev); err != nil {
		return err
	}
	s.unplaced[ev.Head().ID] = a
	return nil
}

// ErrFolded is returned by [Session.Admit] for an event read back that
// the reader admitted already with [Session.AdmitUnplaced]. It does not
// match [ErrRejected]: nothing is wrong with the event.
var ErrFolded = errors.New("folded already, where it was written")

func (s *Session) admit(a Address, ev event.Event) error {
	if id := ev.Head().ID; s.seen[id] {
		return reject(ReasonReplayed, "event %s was folded already", id)
	}
	switch e := ev.(type) {
	case *event.SessionRequested:
		if s.user == "" {
			s.user = e.User
			// The call that prepares the workspace is the first
			// request's, as a response's calls are the response's.
			if e.Prepare != uuid.Nil {
				s.calls[e.Prepare] = ""
			}
		}
	case *event.ModelResponded:
		for _, c := range e.Calls {
			s.calls[c.ID] = Writer(c.Service)
		}
	case *event.ToolDispatched:
		if _, ok := s.calls[e.Call]; !ok {
			return reject(ReasonNotDispatch, "dispatch of call %s, which no response made", e.Call)
		}
		s.calls[e.Call] = Writer(e.Service)
	case *event.ToolCompleted:
		to, ok := s.calls[e.Call]
		switch {
		case !ok:
			return reject(ReasonNotDispatch, "a result of call %s, which no response made", e.Call)
		case a.Writer != Harness && to != a.Writer:
			return reject(ReasonNotDispatch, "a result of call %s written by %s, to which it was not dispatched", e.Call, a.Writer)
		}
	}
	return nil
}
