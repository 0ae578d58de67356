package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/approvalapi"
	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
	"corral.dev/pkg/event"
	"corral.dev/pkg/sessionindex"
	"corral.dev/services/gateway/internal/wire"
)

// sentEvent is an event a client sends to a session.
type sentEvent struct {
	Type    string `json:"type"`
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	ToolUseID       string `json:"tool_use_id"`
	Result          string `json:"result"`
	DenyMessage     string `json:"deny_message"`
	SessionThreadID string `json:"session_thread_id"`
}

// text returns a user.message's text: its text blocks, a blank line
// between two.
func (e sentEvent) text() (string, error) {
	var parts []string
	for i, b := range e.Content {
		if b.Type != "text" {
			return "", unsupported("content[%d]: a block of type %q (a message to a session is text)", i, b.Type)
		}
		parts = append(parts, b.Text)
	}
	text := strings.Join(parts, "\n\n")
	if strings.TrimSpace(text) == "" {
		return "", badRequest("a user.message needs text")
	}
	return text, nil
}

// sendEvents answers POST /v1/sessions/{id}/events: each user.message is a
// request of the session (its first, or a follow-up), a user.interrupt a
// stop, a user.tool_confirmation a reviewer's decision on a held call.
// Every event is checked before any is acted on.
func (s *Service) sendEvents(ctx context.Context, c *caller, w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Events []sentEvent `json:"events"`
	}
	if err := decode(w, r, &body); err != nil {
		return err
	}
	if len(body.Events) == 0 {
		return badRequest("events: send at least one")
	}
	rec, entry, err := s.session(ctx, c, r.PathValue("id"))
	if err != nil {
		return err
	}
	texts := make([]string, len(body.Events))
	for i, ev := range body.Events {
		switch {
		case ev.SessionThreadID != "":
			return unsupported("events[%d]: session_thread_id (a session is one thread)", i)
		case ev.Type == "user.message":
			if texts[i], err = ev.text(); err != nil {
				return fmt.Errorf("events[%d]: %w", i, err)
			}
		case ev.Type == "user.interrupt":
		case ev.Type == "user.tool_confirmation":
			if _, err := wire.ParseToolUseID(ev.ToolUseID); err != nil {
				return badRequest("events[%d]: %v", i, err)
			}
			if ev.Result != "allow" && ev.Result != "deny" {
				return badRequest("events[%d]: result %q: want allow or deny", i, ev.Result)
			}
		default:
			return unsupported("events[%d]: an event of type %q", i, ev.Type)
		}
	}
	target, err := s.target(ctx, c, rec, entry)
	if err != nil {
		return err
	}
	var out wire.SendResult
	for i, ev := range body.Events {
		taken := wire.Event{Type: ev.Type, ToolUseID: ev.ToolUseID, Result: ev.Result, DenyMessage: ev.DenyMessage}
		switch ev.Type {
		case "user.message":
			first, err := s.markStarted(ctx, c, &target)
			if err != nil {
				return err
			}
			req, err := s.request(ctx, c, &target, texts[i], first)
			if err != nil {
				return err
			}
			taken.ID, taken.Content = wire.ID(req, 0), []wire.Block{wire.Text(texts[i])}
		case "user.interrupt":
			if err := s.interrupt(ctx, c, &target); err != nil {
				return err
			}
			taken.ID = "sevt_" + strings.ReplaceAll(uuid.Must(uuid.NewV7()).String(), "-", "")
		case "user.tool_confirmation":
			if err := s.confirm(ctx, c, &target, ev); err != nil {
				return err
			}
			taken.ID = "sevt_" + strings.ReplaceAll(uuid.Must(uuid.NewV7()).String(), "-", "")
		}
		out.Data = append(out.Data, taken)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// target returns the session events are sent to, as a record: the API's
// own, or one made up for a session started elsewhere, whose user and
// model are its last request's. A user's key may send only to its own
// user's sessions (the harness would refuse another's follow-up); any
// other key speaks for the session's user.
func (s *Service) target(ctx context.Context, c *caller, rec *sessionRecord, e *sessionindex.Entry) (sessionRecord, error) {
	var t sessionRecord
	switch {
	case rec != nil:
		t = *rec
	case e != nil:
		t = sessionRecord{ID: e.Session, User: e.User, Started: true, Agent: agentRecord{Model: e.Model}}
	}
	if t.User == "" {
		// Indexed before its first request was: read the log.
		v, err := s.folded(ctx, c, t.ID, false)
		if err != nil {
			return t, err
		}
		t.User = v.user
	}
	if c.cred.Role == credential.RoleUser && t.User != c.user {
		return t, &apiError{http.StatusForbidden, wire.Permission, fmt.Sprintf("session %s is user %s's: this API key acts as %s", t.ID, t.User, c.user)}
	}
	return t, nil
}

// markStarted notes in the record of an API session, before its first
// request is published, that the request is its first, and reports
// whether it is: of two racing, one is.
func (s *Service) markStarted(ctx context.Context, c *caller, t *sessionRecord) (bool, error) {
	if t.Started {
		return false, nil
	}
	key := sessionKey(c.tenant, bus.UserToken(t.User), t.ID.String())
	for {
		var rec sessionRecord
		seq, err := readRecord(ctx, c.js, key, &rec)
		if err != nil {
			return false, err
		}
		if rec.Started {
			t.Started = true
			return false, nil
		}
		rec.Started = true
		err = writeRecord(ctx, c.js, key, rec, seq)
		if bus.Conflict(err) {
			continue
		}
		if err != nil {
			return false, err
		}
		t.Started = true
		return true, nil
	}
}

// controlNamespace is the UUID namespace of stops' IDs, as corral stop
// derives them: a stop after the same last event of a session has the
// same ID, whoever asks, and the harness records it once.
var controlNamespace = uuid.MustParse("a0d7e27d-460b-4df8-82c1-d15bad671738")

// interrupt asks the harness to stop a running session: a stop request
// as the session's user, as corral stop makes it. A session that is not
// running has nothing to interrupt.
func (s *Service) interrupt(ctx context.Context, c *caller, t *sessionRecord) error {
	e, ok, err := sessionindex.Get(ctx, c.js, c.tenant, t.ID)
	if err != nil {
		return err
	}
	last, err := lastSeq(ctx, c.js, c.tenant, t.ID)
	if err != nil {
		return err
	}
	if last == 0 || ok && e.Status.Ended() && e.Seq == last {
		return nil
	}
	ev := event.SessionStopped{Header: event.NewHeader(event.TypeSessionStopped, c.tenant, t.ID), By: c.user, Reason: "interrupted through the API"}
	ev.ID = uuid.NewSHA1(controlNamespace, fmt.Appendf(nil, "%s:stopped:%d", bus.SessionKey(c.tenant, t.ID), last))
	// Not ev.ID as the request's message ID: the requests' stream drops
	// a message whose ID it holds, whoever sent it and on whatever
	// subject, and ev.ID is derived from what the tenant's other users
	// can read; one of them could send a request of that ID first, and
	// this stop would be dropped unseen. The harness records one stop
	// per ev.ID, so a stop asked twice is still recorded once.
	return bus.Publish(ctx, c.js, bus.RequestSubject(c.tenant, t.ID, t.User), uuid.NewString(), &ev)
}

// confirm decides a call held for a reviewer through the approval service,
// in the name of the key's reviewer: only a reviewer's (or an operator's)
// credential may, as on the reviewers' page.
func (s *Service) confirm(ctx context.Context, c *caller, t *sessionRecord, ev sentEvent) error {
	call, _ := wire.ParseToolUseID(ev.ToolUseID)
	req := approvalapi.DecideRequest{ID: call, Session: t.ID, Approve: ev.Result == "allow", Reason: ev.DenyMessage}
	var resp approvalapi.Response
	err := callAPI(ctx, c, approvalapi.Subject(c.tenant, c.user, bus.OpDecide), req, &resp)
	var se *serviceError
	if errors.As(err, &se) && se.code == approvalapi.CodeNotFound {
		// The approval service may not have read the call from the log
		// yet: asked again while the log says it is held.
		held, herr := s.isHeld(ctx, c, t.ID, ev.ToolUseID)
		if herr != nil {
			return herr
		}
		for wait := 50 * time.Millisecond; held && errors.As(err, &se) && se.code == approvalapi.CodeNotFound && wait < confirmWait; wait *= 2 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(wait):
			}
			err = callAPI(ctx, c, approvalapi.Subject(c.tenant, c.user, bus.OpDecide), req, &resp)
		}
	}
	switch {
	case errors.Is(err, bus.ErrRefused):
		return &apiError{http.StatusForbidden, wire.Permission, "a tool confirmation is a reviewer's decision: this API key's credential is no reviewer's (corral credentials issue --reviewer)"}
	case errors.As(err, &se) && se.code == approvalapi.CodeNotFound:
		return notFound("no call %s waits for a confirmation in session %s", ev.ToolUseID, t.ID)
	case errors.As(err, &se) && se.code == approvalapi.CodeDecided:
		return &apiError{http.StatusConflict, wire.InvalidRequest, se.desc}
	}
	return err
}

// confirmWait is about how long a confirmation of a call the log holds
// waits for the approval service to have read it.
const confirmWait = 10 * time.Second

// isHeld reports whether the log of session shows the call toolUseID
// names waiting for a confirmation.
func (s *Service) isHeld(ctx context.Context, c *caller, session uuid.UUID, toolUseID string) (bool, error) {
	v, err := s.folded(ctx, c, session, false)
	if err != nil {
		return false, err
	}
	for _, ev := range v.events {
		if ev.StopReason != nil && ev.StopReason.Type == "requires_action" && slices.Contains(ev.StopReason.EventIDs, toolUseID) {
			return true, nil
		}
	}
	return false, nil
}
