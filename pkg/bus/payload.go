package bus

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/event"
)

// OffloadThreshold is the size above which an event is stored in the
// payloads object store and the log carries an [event.Offloaded] stub
// instead. It keeps session logs small however much a session reads,
// writes and prints: the log is read whole whenever a session is rebuilt.
const OffloadThreshold = 16 << 10

// Record appends ev to its session's log under msgID (deduplicated within
// the stream's window). An event larger than [OffloadThreshold] is stored
// once, content-addressed, in the payloads object store first, and the log
// gets a stub that [Resolve] turns back into the event.
//
// A publish the server drops as a duplicate of msgID returns an error
// wrapping [ErrDuplicate]: the event was recorded before, maybe not with
// this content. Most callers treat that as success.
func Record(ctx context.Context, js jetstream.JetStream, ev event.Event, msgID string) error {
	_, err := record(ctx, js, ev, msgID)
	return err
}

// Append is [Record] on the condition that the last event of ev's session
// is the one at stream sequence after (0: the session has none). It
// returns the sequence ev was stored at, or an error wrapping [ErrNotLast]
// when another event came after that one; ev is then not recorded. A
// writer that folded its session's log up to after and appends this way
// knows the log up to the new event without reading it back.
func Append(ctx context.Context, js jetstream.JetStream, ev event.Event, msgID string, after uint64) (uint64, error) {
	h := ev.Head()
	ack, err := record(ctx, js, ev, msgID, jetstream.WithExpectLastSequenceForSubject(after, SessionEvents(h.Tenant, h.Session)))
	if Conflict(err) {
		return 0, fmt.Errorf("%w: %w", ErrNotLast, err)
	}
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// ErrNotLast is returned by [Append] when the session's log has an event
// after the one it was to follow.
var ErrNotLast = errors.New("not the last event of the session")

func record(ctx context.Context, js jetstream.JetStream, ev event.Event, msgID string, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	ctx, cancel := Bound(ctx)
	defer cancel()
	h := ev.Head()
	subject := EventSubject(h.Tenant, h.Session, h.Type)
	data, err := json.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", subject, err)
	}
	if len(data) > OffloadThreshold {
		name, err := storePayload(ctx, js, data)
		if err != nil {
			return nil, fmt.Errorf("offload %s: %w", subject, err)
		}
		stub := event.Offloaded{Header: *h, Of: h.Type, Object: name, Size: len(data)}
		stub.Type = event.TypeOffloaded
		if data, err = json.Marshal(&stub); err != nil {
			return nil, fmt.Errorf("encode %s: %w", subject, err)
		}
	}
	ack, err := js.Publish(ctx, subject, data, append(opts, jetstream.WithMsgID(msgID))...)
	if err != nil {
		return nil, fmt.Errorf("publish %s: %w", subject, err)
	}
	if ack.Duplicate {
		return nil, fmt.Errorf("%w: %s %s", ErrDuplicate, subject, msgID)
	}
	return ack, nil
}

// ErrDuplicate is returned by [Record] when the server already has an
// event under the same message ID.
var ErrDuplicate = errors.New("recorded already")

// storePayload puts data in the payloads store under the name of its
// SHA-256, unless it is there already, and returns the name.
func storePayload(ctx context.Context, js jetstream.JetStream, data []byte) (string, error) {
	sum := sha256.Sum256(data)
	name := "sha256-" + hex.EncodeToString(sum[:])
	obs, err := payloads(ctx, js)
	if err != nil {
		return "", err
	}
	if _, err := obs.GetInfo(ctx, name); err == nil {
		return name, nil
	} else if !errors.Is(err, jetstream.ErrObjectNotFound) {
		return "", err
	}
	if _, err := obs.PutBytes(ctx, name, data); err != nil {
		return "", err
	}
	return name, nil
}

var offloadedType = []byte(`"type":"` + event.TypeOffloaded + `"`)

// Resolve returns the event a log message stands for: the message itself,
// or for an [event.Offloaded] stub the stored event, checked against its
// hash.
func Resolve(ctx context.Context, js jetstream.JetStream, data []byte) ([]byte, error) {
	if !bytes.Contains(data, offloadedType) {
		return data, nil
	}
	var stub event.Offloaded
	if err := json.Unmarshal(data, &stub); err != nil || stub.Type != event.TypeOffloaded {
		return data, nil // not a stub after all: let the caller's parse judge it
	}
	ctx, cancel := Bound(ctx)
	defer cancel()
	obs, err := payloads(ctx, js)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", stub.Object, err)
	}
	full, err := obs.GetBytes(ctx, stub.Object)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", stub.Object, err)
	}
	sum := sha256.Sum256(full)
	if "sha256-"+hex.EncodeToString(sum[:]) != stub.Object {
		return nil, fmt.Errorf("resolve %s: content does not match its hash", stub.Object)
	}
	return full, nil
}

// payloadStores holds the payloads store's handle per JetStream context,
// so that offloading and resolving do not look the bucket up (a round
// trip) every time.
var payloadStores sync.Map // jetstream.JetStream → jetstream.ObjectStore

func payloads(ctx context.Context, js jetstream.JetStream) (jetstream.ObjectStore, error) {
	if obs, ok := payloadStores.Load(js); ok {
		return obs.(jetstream.ObjectStore), nil
	}
	obs, err := js.ObjectStore(ctx, BucketPayloads)
	if err != nil {
		return nil, err
	}
	payloadStores.Store(js, obs)
	return obs, nil
}
