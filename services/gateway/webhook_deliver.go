package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/lock"
	"corral.dev/pkg/seal"
	"corral.dev/pkg/sessionindex"
	"corral.dev/pkg/sessionlog"
	"corral.dev/pkg/webhookapi"
)

// webhooks posts the tenants' webhooks and answers their API.
//
// Delivery is at least once: a durable consumer of the session events
// that webhooks announce acknowledges an event only once every webhook
// that asked for it has answered 2xx or been given up on, each attempt
// recorded first in [bus.StreamWebhooks]. A failed attempt has the event
// redelivered after a delay that doubles each time, other events going on
// meanwhile; after [WebhookConfig.MaxAttempts] it is recorded as failed.
// A redelivered event is not posted again to a webhook whose last record
// of it says it is settled.
type webhooks struct {
	cfg    WebhookConfig
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	box    *seal.Sealer // seals the webhooks' secrets
	hooks  *hooks
	poster *poster
	logs   *sessionlog.Log
	log    *slog.Logger
}

// newWebhooks returns the webhooks of the gateway whose connection is js,
// reading the logs with logs.
func newWebhooks(ctx context.Context, js jetstream.JetStream, cfg WebhookConfig, logs *sessionlog.Log, log *slog.Logger) (*webhooks, error) {
	kv, err := js.KeyValue(ctx, bus.BucketWebhooks)
	if err != nil {
		return nil, fmt.Errorf("open kv %s: %w (corral setup makes it)", bus.BucketWebhooks, err)
	}
	if cfg.Key == nil {
		return nil, errNoWebhookKey
	}
	box, err := seal.New(cfg.Key)
	if err != nil {
		return nil, fmt.Errorf("CORRAL_GATEWAY_WEBHOOK_KEY: %w", err)
	}
	cfg = cfg.withDefaults()
	return &webhooks{cfg: cfg, js: js, kv: kv, box: box, hooks: newHooks(kv), poster: newPoster(cfg), logs: logs, log: log}, nil
}

// run keeps the webhooks up to date, delivers them and answers their API
// until ctx is done.
func (w *webhooks) run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return w.hooks.watch(ctx) })
	g.Go(func() error { return w.consume(ctx) })
	g.Go(func() error { return w.serve(ctx) })
	g.Go(func() error { w.reseal(ctx); return nil })
	return g.Wait()
}

// announced are the session events webhooks announce: the lifecycle's,
// and the approvals asked for.
var announced = []string{"events.*.*.session.>", "events.*.*.approval.requested.>"}

// consume delivers the webhooks until ctx is done. A tenant's events take
// at most a quarter of the handlers at once, so that a tenant whose
// receiver is slow does not hold up the others'.
func (w *webhooks) consume(ctx context.Context) error {
	return bus.Consume(ctx, w.js, bus.Consumer{
		Stream: bus.StreamEvents,
		Config: jetstream.ConsumerConfig{
			Durable:        bus.ConsumerGatewayWebhooks,
			FilterSubjects: announced,
			// What happened before Corral had webhooks is announced to
			// none; from then on, a restart resumes where it left off.
			DeliverPolicy: jetstream.DeliverNewPolicy,
			// Events waiting for their next attempt are pending acks:
			// room for many, so that a receiver that is down holds up no
			// other.
			MaxAckPending: 8192,
		},
		Concurrency: 16,
		Gate:        &lock.Gate{Size: 16, PerGroup: 4},
		Admit:       bus.BySession,
		Handler:     w.announce,
		Logger:      w.log,
	})
}

// announce posts the event m to every webhook of its tenant that asked
// for it and was added before it.
func (w *webhooks) announce(ctx context.Context, m bus.Msg) error {
	en, err := w.logs.Judge(ctx, m)
	if err != nil {
		return err // rejected (and dead-lettered), or worth a retry
	}
	p, ok := payloadOf(en)
	if !ok {
		return nil
	}
	hs, err := w.hooks.of(ctx, en.Tenant)
	if err != nil {
		return err
	}
	body, err := json.Marshal(p)
	if err != nil {
		return err
	}
	msgID := webhookapi.MessageID(en.Event.Head().ID)
	attempt := int(max(m.Delivered, 1))
	var failed []error
	for _, h := range hs {
		if !h.wants(p.Type) || p.Timestamp.Before(h.CreatedAt) {
			continue
		}
		d := webhookapi.Delivery{Webhook: h.ID, MessageID: msgID, Event: p.Type, Session: en.Session, Attempt: attempt}
		if err := w.deliver(ctx, h, d, body); err != nil {
			failed = append(failed, fmt.Errorf("webhook %s: %w", h.ID, err))
		}
	}
	if len(failed) > 0 {
		err := errors.Join(failed...)
		w.log.WarnContext(ctx, "webhook not delivered, will retry", "tenant", en.Tenant, "session", en.Session, "attempt", attempt, "err", err)
		return bus.NotYet(w.retryDelay(attempt), err)
	}
	return nil
}

// deliver makes attempt d.Attempt to post body to h, unless an earlier
// one settled it, and records it. It returns an error when another
// attempt is to follow.
func (w *webhooks) deliver(ctx context.Context, h *hookRecord, d webhookapi.Delivery, body []byte) error {
	subject := bus.WebhookDeliverySubject(h.Tenant, h.ID, d.MessageID)
	if d.Attempt > 1 {
		last, err := bus.LastBySubject(ctx, w.js, bus.StreamWebhooks, subject)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
		case err != nil:
			return err
		default:
			var prev webhookapi.Delivery
			if json.Unmarshal(last.Data, &prev) == nil && prev.Settled() {
				return nil
			}
		}
	}
	d = w.attempt(ctx, h, d, body)
	if d.Outcome == webhookapi.Retrying && d.Attempt >= w.cfg.MaxAttempts {
		d.Outcome = webhookapi.Failed
	}
	if err := w.record(ctx, h.Tenant, d); err != nil {
		return err
	}
	if d.Outcome == webhookapi.Failed {
		w.log.ErrorContext(ctx, "webhook given up", "tenant", h.Tenant, "webhook", h.ID, "message", d.MessageID, "attempts", d.Attempt, "err", d.Error)
	}
	if d.Outcome == webhookapi.Retrying {
		return errors.New(d.Error)
	}
	return nil
}

// attempt posts body to h once and returns d with what came of it.
func (w *webhooks) attempt(ctx context.Context, h *hookRecord, d webhookapi.Delivery, body []byte) webhookapi.Delivery {
	start := time.Now()
	d.Time = start.UTC()
	secret, err := w.secret(h)
	status := 0
	if err == nil {
		status, err = w.poster.post(ctx, h.URL, secret, d.MessageID, start, body)
	}
	d.Duration, d.Status, d.Outcome = time.Since(start), status, webhookapi.Delivered
	if err != nil {
		d.Error, d.Outcome = err.Error(), webhookapi.Retrying
	}
	return d
}

// record keeps d, an attempt to deliver to a webhook of tenant, for
// corral webhooks deliveries; an attempt recorded twice is kept once.
func (w *webhooks) record(ctx context.Context, tenant string, d webhookapi.Delivery) error {
	id := fmt.Sprintf("%s:%s:%d", d.Webhook, d.MessageID, d.Attempt)
	if err := bus.Publish(ctx, w.js, bus.WebhookDeliverySubject(tenant, d.Webhook, d.MessageID), id, d); err != nil {
		return fmt.Errorf("record the delivery: %w", err)
	}
	return nil
}

// retryDelay is how long the attempt after attempt n waits: RetryDelay
// doubling with each attempt, up to an hour, with jitter so that the
// retries of many events spread out.
func (w *webhooks) retryDelay(n int) time.Duration {
	d := min(w.cfg.RetryDelay<<min(max(n, 1)-1, 20), time.Hour)
	return d/2 + rand.N(d/2+1)
}

// payloadOf returns what webhooks announce of the accepted event en, and
// false for an event they do not announce. Its tenant and session are
// its subject's.
func payloadOf(en sessionlog.Entry) (webhookapi.Payload, bool) {
	p := webhookapi.Payload{Timestamp: en.Event.Head().Time, Tenant: en.Tenant, Data: webhookapi.Data{SessionID: en.Session.String()}}
	d := &p.Data
	switch ev := en.Event.(type) {
	case *event.SessionCompleted:
		p.Type, d.Status, d.StopReason = webhookapi.EventIdle, string(sessionindex.Completed), "end_turn"
	case *event.ApprovalRequested:
		p.Type, d.Status, d.StopReason = webhookapi.EventRequiresAction, string(sessionindex.Waiting), "requires_action"
		d.Tool, d.Reason = ev.Tool, ev.Reason
	case *event.SessionPaused:
		p.Type, d.Status, d.StopReason, d.Reason = webhookapi.EventBudgetReached, string(sessionindex.Paused), "budget_reached", ev.Reason
	case *event.SessionFailed:
		p.Type, d.Status, d.Code, d.Reason = webhookapi.EventFailed, string(sessionindex.Failed), ev.Code, ev.Reason
		if ev.Code == event.CodeBudget {
			p.Type, d.StopReason = webhookapi.EventBudgetReached, "budget_reached"
		}
	case *event.SessionStopped:
		p.Type, d.Status, d.Reason = webhookapi.EventTerminated, string(sessionindex.Stopped), ev.Reason
	default:
		return webhookapi.Payload{}, false
	}
	return p, true
}

// testPayload is what corral webhooks test sends, as message msgID.
func testPayload(tenant string) (webhookapi.Payload, string) {
	return webhookapi.Payload{Type: webhookapi.EventTest, Timestamp: time.Now().UTC(), Tenant: tenant}, webhookapi.MessageID(uuid.Must(uuid.NewV7()))
}
