package sessionlog

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
)

// OffloadThreshold is the size above which an event is stored in the
// PAYLOADS stream and the log carries an [event.Offloaded] stub
// instead. It keeps session logs small however much a session reads,
// writes and prints: the log is read whole whenever a session is rebuilt.
const OffloadThreshold = 16 << 10

// offload stores data, the event with header h, in the PAYLOADS stream
// under its tenant and returns the stub that stands for it in the log.
func offload(ctx context.Context, js jetstream.JetStream, h *event.Header, data []byte) ([]byte, error) {
	sum := sha256.Sum256(data)
	hash := hex.EncodeToString(sum[:])
	subject := bus.PayloadSubject(h.Tenant, hash)
	// Stored once per tenant and content: a second store within the
	// window is dropped, and one after it replaces the same bytes.
	if _, err := js.Publish(ctx, subject, data, jetstream.WithMsgID(subject)); err != nil {
		return nil, fmt.Errorf("store %s: %w", subject, err)
	}
	stub := event.Offloaded{Header: *h, Of: h.Type, Object: "sha256-" + hash, Size: len(data)}
	stub.Type = event.TypeOffloaded
	return json.Marshal(&stub)
}

var offloadedType = []byte(`"type":"` + event.TypeOffloaded + `"`)

// resolve returns the event a log message of tenant's stands for: the
// message itself, or for an [event.Offloaded] stub the stored event of
// that tenant, checked against its hash. A stub naming another tenant, or
// whose event is missing or does not match its hash, is rejected
// ([ErrRejected]); other errors are worth a retry. The stored event is
// judged by [Check] like any other, its header included.
func resolve(ctx context.Context, js jetstream.JetStream, tenant string, data []byte) ([]byte, error) {
	if !bytes.Contains(data, offloadedType) {
		return data, nil
	}
	var stub event.Offloaded
	if err := json.Unmarshal(data, &stub); err != nil || stub.Type != event.TypeOffloaded {
		return data, nil // not a stub after all: Check judges it
	}
	// The payload is looked for under the subject's tenant, never the
	// body's: a client may read its own tenant's payloads alone, and a
	// read it may not make would fail the whole read, not skip the stub.
	if stub.Tenant != tenant {
		return nil, reject(ReasonTenant, "a stub of tenant %q on a subject of tenant %q", stub.Tenant, tenant)
	}
	// The hash becomes a subject token: anything but the lower-case hex
	// of a SHA-256 (a wildcard, a dot, a space) would ask the server for
	// something else, or break the request.
	hash, ok := strings.CutPrefix(stub.Object, "sha256-")
	if sum, err := hex.DecodeString(hash); !ok || err != nil || len(sum) != sha256.Size || hex.EncodeToString(sum) != hash {
		return nil, reject(ReasonUnresolvable, "a stub naming %q", stub.Object)
	}
	m, err := bus.LastBySubject(ctx, js, bus.StreamPayloads, bus.PayloadSubject(tenant, hash))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, reject(ReasonUnresolvable, "the stored event %s is missing", stub.Object)
	}
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", stub.Object, err)
	}
	sum := sha256.Sum256(m.Data)
	if hex.EncodeToString(sum[:]) != hash {
		return nil, reject(ReasonUnresolvable, "the stored event %s does not match its hash", stub.Object)
	}
	return m.Data, nil
}
