package bus

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// Swap stores value under key on the condition that the key is at
// revision rev or, when rev is 0, that it holds no value, and returns the
// key's new revision. When another writer came first, the error satisfies
// [Conflict].
func Swap(ctx context.Context, kv jetstream.KeyValue, key string, value []byte, rev uint64) (uint64, error) {
	if rev == 0 {
		return kv.Create(ctx, key, value)
	}
	return kv.Update(ctx, key, value, rev)
}

// Conflict reports whether err is a compare-and-set that lost: a key
// created or updated by another writer first, or a publish whose expected
// last sequence was not the last. A stream with one replica reports it
// with error code 10071, a replicated one with 10164; both are a conflict.
func Conflict(err error) bool {
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
