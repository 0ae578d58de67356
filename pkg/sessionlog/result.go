package sessionlog

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
)

// RecordResult records r, the result of tool call c, in its session's
// log under the ID c names ([event.ToolCall.ResultID]; <call>:result
// for a call that names none), written as the Log's writer (the tool
// service). A result recorded already counts as recorded: the first one
// stands. When c's After is set, the result is recorded on the condition
// that it directly follows that event, and says so in its own After, so
// that the harness folds it in without reading the log; when something
// came in between, it is recorded without the condition.
func (l *Log) RecordResult(ctx context.Context, r *event.ToolCompleted, c *event.ToolCall) error {
	id := cmp.Or(c.ResultID, r.Call.String()+":result")
	// Stamped with its end, not with the start its header was made at: a
	// call killed by a stop is shown after the stop.
	r.Time = time.Now().UTC()
	if c.After > 0 {
		r.After = c.After
		_, err := l.Append(ctx, r, id, c.After)
		if err == nil || errors.Is(err, ErrDuplicate) {
			return nil
		}
		if !errors.Is(err, ErrNotLast) {
			return err
		}
		r.After = 0
	}
	if err := l.Record(ctx, r, id); err != nil && !errors.Is(err, ErrDuplicate) {
		return err
	}
	return nil
}

// ResultID returns the ID under which the result of call, of tenant's
// session, is to be recorded ([event.ToolCall.ResultID]): keyed with the
// Log's IDKey, so that only the Log's writer and the service it gives the
// call to can tell it. It returns "" for a Log with no key.
func (l *Log) ResultID(tenant string, session, call uuid.UUID) string {
	if len(l.o.IDKey) == 0 {
		return ""
	}
	mac := hmac.New(sha256.New, l.o.IDKey)
	mac.Write([]byte("result\x00" + bus.SessionKey(tenant, session) + ":" + call.String()))
	return event.ResultID(call, mac.Sum(nil))
}

// GiveUpCall returns a [bus.Consumer.OnGiveUp] hook for a tool service: it
// answers a call that can never run (undecodable, or failing every
// delivery) with an error result naming the service, so that its session
// does not wait for it forever. The session is the one the call's subject
// names; a message whose subject or body names no call, or that the
// harness did not sign (harness, its public key: see [bus.DecodeToolCall]),
// is left to the dead letter.
func (l *Log) GiveUpCall(service string, harness ed25519.PublicKey) func(ctx context.Context, m bus.Msg, reason error) error {
	return func(ctx context.Context, m bus.Msg, reason error) error {
		c, err := bus.DecodeToolCall(m, harness)
		if err != nil {
			return nil
		}
		return l.RecordResult(ctx, &event.ToolCompleted{
			Header:  event.NewHeader(event.TypeToolCompleted, c.Tenant, c.Session),
			Call:    c.Call,
			Name:    c.Name,
			Output:  "Error: the " + service + " could not run this call: " + reason.Error(),
			IsError: true,
			Service: service,
		}, &event.ToolCall{Call: c.Call, ResultID: c.ResultID})
	}
}
