package bus

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Setup creates or updates every stream and KV bucket Corral uses. It is
// idempotent; every service calls it at start-up, so none depends on another
// having started first.
func Setup(ctx context.Context, js jetstream.JetStream) error {
	for _, cfg := range streams {
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("create stream %s: %w", cfg.Name, err)
		}
	}
	for _, cfg := range buckets {
		if _, err := js.CreateOrUpdateKeyValue(ctx, cfg); err != nil {
			return fmt.Errorf("create kv %s: %w", cfg.Bucket, err)
		}
	}
	for _, cfg := range objectStores {
		if _, err := js.CreateOrUpdateObjectStore(ctx, cfg); err != nil {
			return fmt.Errorf("create object store %s: %w", cfg.Bucket, err)
		}
	}
	return nil
}
