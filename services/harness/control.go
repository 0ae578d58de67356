package harness

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/sessionlog"
	"corral.dev/schemas"
)

// handleControl records a stop (corral stop) or a budget raise (corral
// raise) that user asked for, over the subject of its request, in the
// session's log, once it has checked that the session is that user's: a
// bot's or a reviewer's credential speaks for the session's user, a user's
// credential only for itself. Clients write nothing to the session logs
// themselves. A stop does not wait for the session's lock: it must reach a
// step that is asking the model or waiting for a call.
// handleConsoleStop records a stop the sessions console sent: on a
// subject only the approval service may publish, which signed in the
// person the stop names and checked they may see the session. Nothing but
// a stop naming them is taken there.
func (s *Service) handleConsoleStop(ctx context.Context, tenant string, session uuid.UUID, data []byte) error {
	if typ := controlType(data); typ != event.TypeSessionStopped {
		return bus.Permanent(fmt.Errorf("the sessions console sends stops alone, not %q", cmp.Or(typ, "a request")))
	}
	return s.handleControl(ctx, tenant, session, "", event.TypeSessionStopped, data)
}

// handleControl records a stop or a budget raise of a session of tenant,
// sent on user's subject ("" for the console's, see [handleConsoleStop]).
func (s *Service) handleControl(ctx context.Context, tenant string, session uuid.UUID, user, typ string, data []byte) error {
	if err := schemas.Validate(typ, data); err != nil {
		return bus.Permanent(fmt.Errorf("invalid %s: %v", typ, err))
	}
	v, err := event.Parse(data)
	if err != nil {
		return bus.Permanent(fmt.Errorf("invalid %s: %v", typ, err))
	}
	ev := v.(event.Event)
	h := ev.Head()
	if h.ID == uuid.Nil {
		return bus.Permanent(fmt.Errorf("invalid %s: id is missing", typ))
	}
	if h.Tenant != tenant || h.Session != session {
		return bus.Permanent(fmt.Errorf("invalid %s: it names %s/%s on the subject of %s/%s", typ, h.Tenant, h.Session, tenant, session))
	}
	first, found, err := s.logs.First(ctx, tenant, session, event.TypeSessionRequested)
	if err != nil {
		return err
	}
	if !found {
		return bus.Permanent(fmt.Errorf("no session %s in tenant %s", session, tenant))
	}
	if owner := first.Event.(*event.SessionRequested).User; user != "" && owner != user {
		return bus.Permanent(fmt.Errorf("session %s is not user %q's", session, user))
	}
	if stop, ok := ev.(*event.SessionStopped); ok && user == "" && stop.By == "" {
		return bus.Permanent(errors.New("invalid stop from the sessions console: it names no one"))
	}
	// The recorded event says who asked as the subject does.
	h.Time = h.Time.UTC()
	switch e := ev.(type) {
	case *event.SessionStopped:
		// Who stopped it is as the stop says, else the subject's user: a
		// reviewer's, an operator's or a bot's credential sends a stop on
		// the session's user's subject, which says whose session it is,
		// not who sent it. A user's credential sends on its own subject
		// alone, so a stop that names someone else falsely can come only
		// from the session's own user, about their own session.
		if e.By == "" {
			e.By = user
		}
	case *event.BudgetRaise:
		if e.Raise == uuid.Nil {
			return bus.Permanent(errors.New("invalid raise: raise is missing"))
		}
		e.User = user
	}
	if err := s.logs.Record(ctx, ev, "control:"+h.ID.String()); err != nil && !errors.Is(err, sessionlog.ErrDuplicate) {
		return err
	}
	return nil
}
