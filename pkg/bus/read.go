package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
)

// ReadAll returns every message of stream matching filter that is stored
// when it is called, oldest first. Offloaded events come back resolved
// (see [Resolve]).
func ReadAll(ctx context.Context, js jetstream.JetStream, stream, filter string) ([]Msg, error) {
	rctx, cancel := Bound(ctx)
	defer cancel()
	cons, err := js.OrderedConsumer(rctx, stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter},
		// The server forgets the consumer soon after the read.
		InactiveThreshold: 5 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", filter, err)
	}
	info, err := cons.Info(rctx)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", filter, err)
	}
	pending := info.NumPending
	out := make([]Msg, 0, pending)
	for pending > 0 {
		batch, err := cons.Fetch(int(min(pending, 512)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", filter, err)
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			meta, err := msg.Metadata()
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", filter, err)
			}
			data, err := Resolve(ctx, js, msg.Data())
			if err != nil {
				return nil, fmt.Errorf("read %s: seq %d: %w", filter, meta.Sequence.Stream, err)
			}
			out = append(out, Msg{Subject: msg.Subject(), Data: data, StreamSeq: meta.Sequence.Stream,
				Delivered: meta.NumDelivered, MsgID: msg.Headers().Get(jetstream.MsgIDHeader)})
			pending = meta.NumPending
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("read %s: %w", filter, err)
		}
		if n == 0 {
			return nil, fmt.Errorf("read %s: no messages while %d pending", filter, pending)
		}
	}
	return out, nil
}

// ErrBadSubject is returned by [ParseSubject] for a subject that does not
// name a tenant and a session.
var ErrBadSubject = errors.New("subject does not name a tenant and session")

// ParseSubject returns the tenant and session named by a request, event or
// tool subject (requests.<tenant>.<session>, events.<tenant>.<session>.…,
// tools.<service>.<tenant>.<session>).
func ParseSubject(subject string) (string, uuid.UUID, error) {
	tok := strings.Split(subject, ".")
	i := 1
	if tok[0] == "tools" {
		i = 2
	}
	if len(tok) < i+2 {
		return "", uuid.Nil, fmt.Errorf("%w: %s", ErrBadSubject, subject)
	}
	id, err := uuid.Parse(tok[i+1])
	if err != nil {
		return "", uuid.Nil, fmt.Errorf("%w: %s", ErrBadSubject, subject)
	}
	return tok[i], id, nil
}

// ReadAfter returns the messages of stream matching filter stored after
// sequence seq, oldest first, one direct get each: cheaper than [ReadAll]
// when there are only a few. stream must have AllowDirect set and be
// looked up once by the caller. Offloaded events come back resolved.
func ReadAfter(ctx context.Context, js jetstream.JetStream, stream jetstream.Stream, filter string, seq uint64) ([]Msg, error) {
	var out []Msg
	for {
		rctx, cancel := Bound(ctx)
		raw, err := stream.GetMsg(rctx, seq+1, jetstream.WithGetMsgSubject(filter))
		cancel()
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read %s after %d: %w", filter, seq, err)
		}
		data, err := Resolve(ctx, js, raw.Data)
		if err != nil {
			return nil, fmt.Errorf("read %s: seq %d: %w", filter, raw.Sequence, err)
		}
		out = append(out, Msg{Subject: raw.Subject, Data: data, StreamSeq: raw.Sequence, MsgID: raw.Header.Get(jetstream.MsgIDHeader)})
		seq = raw.Sequence
	}
}
