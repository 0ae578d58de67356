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
	return publish(ctx, js, subject, v, jetstream.WithMsgID(msgID))
}

// publish marshals v as JSON and publishes it to subject with opts, for
// as long as the connection's permissions allow it.
func publish(ctx context.Context, js jetstream.JetStream, subject string, v any, opts ...jetstream.PublishOpt) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", subject, err)
	}
	ctx, cancel := Bound(ctx)
	defer cancel()
	ctx, stop := WhilePermitted(ctx, js.Conn(), subject)
	defer stop()
	if _, err := js.Publish(ctx, subject, data, opts...); err != nil {
		return fmt.Errorf("publish %s: %w", subject, Refusal(ctx, err))
	}
	return nil
}

// PublishFirst marshals v as JSON and publishes it to subject unless the
// stream holds a message on subject already, and reports whether the
// stream stored v: false when it held one (on a work queue, one not yet
// taken).
//
// It sets no Nats-Msg-Id. A stream's duplicate window is the stream's
// whole, across its subjects: any ID a client can work out, another
// client (of another tenant, or another user) can work out too, and send
// first on a subject of its own, and this message would be dropped as its
// duplicate. What the subject holds, on the other hand, only those who
// may publish on it can change. So a publish that must be stored once
// however often it is retried, on a subject of its own, uses this.
func PublishFirst(ctx context.Context, js jetstream.JetStream, subject string, v any) (bool, error) {
	err := publish(ctx, js, subject, v, jetstream.WithExpectLastSequencePerSubject(0))
	if Conflict(err) {
		return false, nil
	}
	return err == nil, err
}
