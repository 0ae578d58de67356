package slackbridge

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
)

// A signed Slack request stays valid for five minutes, however often it
// is sent: the Events API's are harmless sent again (a message's request
// ID is derived from it), but each slash command would start a session.
// So a slash command is claimed before it is acted on, under
// <tenant>.command.<digest> in [Bucket], the digest being of what Slack
// signed (the timestamp and the body): a second claim of the same request,
// by this bridge or another, or after a restart, finds the key and is
// refused.

// commandTTL is how long a claim is kept: longer than the five minutes a
// signature is accepted for, with room for clocks that disagree.
const commandTTL = 10 * time.Minute

// errTTLDisabled is the server's error code for a per-message TTL on a
// stream that allows none: a bucket set up by a bridge of before claims.
const errTTLDisabled jetstream.ErrorCode = 10166

// commandKey is the key of the claim of the slash command signed at
// timestamp ts (the header's text) with body.
func commandKey(tenant, ts string, body []byte) string {
	h := sha256.New()
	h.Write([]byte(ts))
	h.Write([]byte{0})
	h.Write(body)
	return tenant + ".command." + hex.EncodeToString(h.Sum(nil))
}

// claim records key in tenant's keys, once: it reports false when the key
// is there already. The claim expires after ttl where the bucket allows
// per-message TTLs (corral setup makes it so), else with the bucket's
// entries.
func (s store) claim(ctx context.Context, tenant, key string, ttl time.Duration) (bool, error) {
	js, err := s.conn(tenant)
	if err != nil {
		return false, err
	}
	ctx, cancel := bus.Bound(ctx)
	defer cancel()
	value := []byte(time.Now().UTC().Format(time.RFC3339Nano))
	_, err = js.Publish(ctx, keySubject(key), value, jetstream.WithExpectLastSequencePerSubject(0), jetstream.WithMsgTTL(ttl))
	if apiErr, ok := errors.AsType[*jetstream.APIError](err); ok && apiErr.ErrorCode == errTTLDisabled {
		_, err = js.Publish(ctx, keySubject(key), value, jetstream.WithExpectLastSequencePerSubject(0))
	}
	switch {
	case bus.Conflict(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("claim %s: %w", key, err)
	}
	return true, nil
}
