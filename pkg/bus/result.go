package bus

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/event"
)

// RecordResult records a tool call's result in its session's log under
// the message ID <call>:result. A result recorded already counts as
// recorded: the first one stands. after is the call's [event.ToolCall]
// After: when set, the result is recorded on the condition that it
// directly follows that event, and says so in its own After, so that the
// harness folds it in without reading the log; when something came in
// between, it is recorded without the condition.
func RecordResult(ctx context.Context, js jetstream.JetStream, r *event.ToolCompleted, after uint64) error {
	id := r.Call.String() + ":result"
	if after > 0 {
		r.After = after
		_, err := Append(ctx, js, r, id, after)
		if err == nil || errors.Is(err, ErrDuplicate) {
			return nil
		}
		if !errors.Is(err, ErrNotLast) {
			return err
		}
		r.After = 0
	}
	if err := Record(ctx, js, r, id); err != nil && !errors.Is(err, ErrDuplicate) {
		return err
	}
	return nil
}

// GiveUpCall returns a [Consumer.OnGiveUp] hook for a tool service: it
// answers a call that can never run (undecodable, or failing every
// delivery) with an error result naming the service, so that its session
// does not wait for it forever. A message that names no call is left to
// the dead letter.
func GiveUpCall(js jetstream.JetStream, service string) func(ctx context.Context, m Msg, reason error) error {
	return func(ctx context.Context, m Msg, reason error) error {
		var c event.ToolCall
		if json.Unmarshal(m.Data, &c) != nil || event.CheckTenant(c.Tenant) != nil || c.Call == uuid.Nil {
			return nil
		}
		return RecordResult(ctx, js, &event.ToolCompleted{
			Header:  event.NewHeader(event.TypeToolCompleted, c.Tenant, c.Session),
			Call:    c.Call,
			Name:    c.Name,
			Output:  "Error: the " + service + " could not run this call: " + reason.Error(),
			IsError: true,
		}, 0)
	}
}
