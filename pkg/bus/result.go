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
// recorded: the first one stands.
func RecordResult(ctx context.Context, js jetstream.JetStream, r *event.ToolCompleted) error {
	if err := Record(ctx, js, r, r.Call.String()+":result"); err != nil && !errors.Is(err, ErrDuplicate) {
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
		})
	}
}
