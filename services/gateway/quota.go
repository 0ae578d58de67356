package gateway

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/services/gateway/internal/wire"
)

// Every tenant's records (agents, sessions) share one bucket, whose
// clients write only their own tenant's keys: without a bound per tenant,
// one tenant's keys could fill it, and no other tenant could create
// anything. The API creates a record for a tenant only while the tenant
// keeps fewer than Config.MaxRecords.

// defaultMaxRecords is the records a tenant may keep, by default.
const defaultMaxRecords = 100_000

// capped is h, answered only while c's tenant keeps fewer records than
// it may: an endpoint that creates one.
func (s *Service) capped(h handler) handler {
	return func(ctx context.Context, c *caller, w http.ResponseWriter, r *http.Request) error {
		n, err := s.countRecords(ctx, c.tenant)
		if err != nil {
			return err
		}
		if most := cmp.Or(s.cfg.MaxRecords, defaultMaxRecords); n >= uint64(most) {
			return &apiError{http.StatusForbidden, wire.Permission, fmt.Sprintf(
				"tenant %s keeps %d agents and sessions, the most a tenant may (CORRAL_GATEWAY_MAX_RECORDS=%d): ask the operator to raise it", c.tenant, n, most)}
		}
		return h(ctx, c, w, r)
	}
}

// countRecords returns how many keys of tenant the records' bucket holds,
// counted by the server: the messages pending for a consumer that would
// deliver the last of each key of tenant's, made and let go of at once
// on the gateway's own connection (which may read the whole bucket).
func (s *Service) countRecords(ctx context.Context, tenant string) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cons, err := s.js.CreateConsumer(ctx, recordStream, jetstream.ConsumerConfig{
		FilterSubject:     recordSubject(tenant + ".>"),
		DeliverPolicy:     jetstream.DeliverLastPerSubjectPolicy,
		AckPolicy:         jetstream.AckNonePolicy,
		MemoryStorage:     true,
		InactiveThreshold: time.Minute,
	})
	if err != nil {
		return 0, fmt.Errorf("count tenant %s's records: %w", tenant, err)
	}
	info := cons.CachedInfo()
	_ = s.js.DeleteConsumer(context.WithoutCancel(ctx), recordStream, info.Name)
	return info.NumPending, nil
}
