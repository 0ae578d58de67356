package sessionlog

import (
	"context"
	"crypto/ed25519"
	"errors"
	"time"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
)

// RecordResult records a tool call's result in its session's log under
// the message ID <call>:result, written as the Log's writer (the tool
// service). A result recorded already counts as recorded: the first one
// stands. after is the call's [event.ToolCall] After: when set, the result
// is recorded on the condition that it directly follows that event, and
// says so in its own After, so that the harness folds it in without
// reading the log; when something came in between, it is recorded without
// the condition.
func (l *Log) RecordResult(ctx context.Context, r *event.ToolCompleted, after uint64) error {
	id := r.Call.String() + ":result"
	// Stamped with its end, not with the start its header was made at: a
	// call killed by a stop is shown after the stop.
	r.Time = time.Now().UTC()
	if after > 0 {
		r.After = after
		_, err := l.Append(ctx, r, id, after)
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
		}, 0)
	}
}
