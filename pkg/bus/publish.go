package bus

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Publish marshals v as JSON and publishes it to subject with msgID as its
// Nats-Msg-Id, so a second publish of the same ID within the stream's
// duplicate window is dropped by the server. It returns once the stream has
// stored the message (or found it a duplicate).
func Publish(ctx context.Context, js jetstream.JetStream, subject, msgID string, v any) error {
	_, err := PublishOnce(ctx, js, subject, msgID, v)
	return err
}

// PublishOnce is [Publish], and reports whether the stream stored v:
// false when it held a message of msgID already (within its duplicate
// window), and dropped this one.
func PublishOnce(ctx context.Context, js jetstream.JetStream, subject, msgID string, v any) (bool, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return false, fmt.Errorf("encode %s: %w", subject, err)
	}
	ctx, cancel := Bound(ctx)
	defer cancel()
	ctx, stop := WhilePermitted(ctx, js.Conn(), subject)
	defer stop()
	ack, err := js.Publish(ctx, subject, data, jetstream.WithMsgID(msgID))
	if err != nil {
		return false, fmt.Errorf("publish %s: %w", subject, Refusal(ctx, err))
	}
	return !ack.Duplicate, nil
}
