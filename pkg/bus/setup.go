package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"
)

// Setup creates every stream and bucket Corral uses that is missing, and
// updates those whose settings differ. It is idempotent, and every service
// calls it at start-up, so that none depends on another having started
// first. Against streams that are as they should be it only reads: under
// deploy/nats.conf the services may not create or change streams (that
// would let one route messages into another's), and an administrator runs
// `corral setup` once per version instead.
func Setup(ctx context.Context, js jetstream.JetStream) error {
	for _, cfg := range streams {
		s, err := js.Stream(ctx, cfg.Name)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			_, err = js.CreateStream(ctx, cfg)
		case err == nil && !sameStream(s.CachedInfo().Config, cfg):
			_, err = js.UpdateStream(ctx, cfg)
		}
		if err != nil {
			return setupError("stream "+cfg.Name, err)
		}
	}
	for _, cfg := range buckets {
		kv, err := js.KeyValue(ctx, cfg.Bucket)
		switch {
		case errors.Is(err, jetstream.ErrBucketNotFound):
			_, err = js.CreateKeyValue(ctx, cfg)
		case err == nil:
			var st jetstream.KeyValueStatus
			if st, err = kv.Status(ctx); err == nil && (st.TTL() != cfg.TTL || st.History() != int64(cfg.History)) {
				_, err = js.UpdateKeyValue(ctx, cfg)
			}
		}
		if err != nil {
			return setupError("kv "+cfg.Bucket, err)
		}
	}
	for _, cfg := range objectStores {
		_, err := js.ObjectStore(ctx, cfg.Bucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			_, err = js.CreateObjectStore(ctx, cfg)
		}
		if err != nil {
			return setupError("object store "+cfg.Bucket, err)
		}
	}
	return nil
}

func setupError(what string, err error) error {
	return fmt.Errorf("set up %s: %w (a service whose NATS user may not create or change streams needs them set up first: corral setup, as an administrator)", what, err)
}

// sameStream reports whether a stream's settings are the ones Corral sets;
// a setting Corral leaves unset may hold the server's default.
func sameStream(have, want jetstream.StreamConfig) bool {
	unlimited := func(n int32) int32 { return max(n, 0) }
	return slices.Equal(have.Subjects, want.Subjects) && have.Retention == want.Retention &&
		have.Storage == want.Storage && (want.Duplicates == 0 || have.Duplicates == want.Duplicates) &&
		unlimited(have.MaxMsgSize) == unlimited(want.MaxMsgSize) && have.AllowDirect == want.AllowDirect &&
		have.MaxAge == want.MaxAge && have.Description == want.Description &&
		(want.MaxConsumers == 0 || have.MaxConsumers == want.MaxConsumers)
}
