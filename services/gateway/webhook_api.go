package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/webhookapi"
)

// errInvalid marks a request the webhook API refuses as malformed.
var errInvalid = errors.New("invalid request")

// errForbidden marks a change asked for by a credential that may not.
var errForbidden = errors.New("adding, removing and testing webhooks takes a reviewer's or an operator's credential")

// errNoWebhook is returned for a webhook the tenant does not have.
var errNoWebhook = errors.New("no such webhook")

// serve answers the webhook API until ctx is done.
func (w *webhooks) serve(ctx context.Context) error {
	svc, err := micro.AddService(w.js.Conn(), micro.Config{
		Name:        "corral-webhook",
		Version:     "1.0.0",
		Description: "the tenants' webhooks: session events posted to their servers",
	})
	if err != nil {
		return fmt.Errorf("webhook api: %w", err)
	}
	for _, op := range []string{webhookapi.OpAdd, webhookapi.OpList, webhookapi.OpRemove, webhookapi.OpTest, webhookapi.OpDeliveries} {
		h := func(r micro.Request) {
			// Only the server's record says a request came from a client.
			if err := bus.Admit(r, w.cfg.Clients); err != nil {
				w.log.WarnContext(ctx, "webhook api: refused", "subject", r.Subject(), "err", err)
				return
			}
			w.answer(ctx, op, r)
		}
		if err := svc.AddEndpoint(op, micro.HandlerFunc(h), micro.WithEndpointSubject(bus.WebhookAPI("*", "*", op))); err != nil {
			return fmt.Errorf("webhook api: %w", err)
		}
	}
	<-ctx.Done()
	return svc.Stop()
}

// answer answers one request of op.
func (w *webhooks) answer(ctx context.Context, op string, r micro.Request) {
	tenant, user, err := bus.APICaller(r.Subject(), "webhook")
	if err != nil {
		_ = r.Error(webhookapi.CodeBadRequest, err.Error(), nil)
		return
	}
	var req webhookapi.Request
	if err := json.Unmarshal(r.Data(), &req); err != nil {
		_ = r.Error(webhookapi.CodeBadRequest, "malformed request: "+err.Error(), nil)
		return
	}
	// A test posts to the receiver, within its own time-out.
	rctx, cancel := context.WithTimeout(ctx, bus.RequestTimeout+w.cfg.Timeout)
	defer cancel()
	reply, err := w.op(rctx, op, tenant, user == "", req)
	switch {
	case errors.Is(err, errInvalid):
		_ = r.Error(webhookapi.CodeBadRequest, err.Error(), nil)
	case errors.Is(err, errForbidden):
		_ = r.Error(webhookapi.CodeForbidden, err.Error(), nil)
	case errors.Is(err, errNoWebhook):
		_ = r.Error(webhookapi.CodeNotFound, err.Error(), nil)
	case err != nil:
		w.log.WarnContext(rctx, "webhook api", "op", op, "tenant", tenant, "err", err)
		_ = r.Error(webhookapi.CodeInternal, err.Error(), nil)
	default:
		_ = r.RespondJSON(reply)
	}
}

// op does op for tenant; tenantScope says the request came under the
// tenant's own scope, which changes need.
func (w *webhooks) op(ctx context.Context, op, tenant string, tenantScope bool, req webhookapi.Request) (webhookapi.Reply, error) {
	if (op == webhookapi.OpAdd || op == webhookapi.OpRemove || op == webhookapi.OpTest) && !tenantScope {
		return webhookapi.Reply{}, errForbidden
	}
	if req.ID != "" && !hookIDRE.MatchString(req.ID) {
		return webhookapi.Reply{}, fmt.Errorf("%w: webhook %q: no webhook's ID looks like that (corral webhooks ls lists them)", errInvalid, req.ID)
	}
	switch op {
	case webhookapi.OpAdd:
		return w.add(ctx, tenant, req)
	case webhookapi.OpList:
		hs, err := w.list(ctx, tenant)
		if err != nil {
			return webhookapi.Reply{}, err
		}
		out := webhookapi.Reply{Webhooks: []webhookapi.Webhook{}}
		for _, h := range hs {
			out.Webhooks = append(out.Webhooks, h.Webhook)
		}
		return out, nil
	case webhookapi.OpRemove:
		h, err := w.get(ctx, tenant, req.ID)
		if err != nil {
			return webhookapi.Reply{}, err
		}
		if err := w.kv.Delete(ctx, hookKey(tenant, req.ID)); err != nil {
			return webhookapi.Reply{}, err
		}
		w.hooks.apply(hookKey(tenant, req.ID), jetstream.KeyValueDelete, nil)
		w.log.InfoContext(ctx, "webhook removed", "tenant", tenant, "webhook", req.ID)
		return webhookapi.Reply{Webhook: &h.Webhook}, nil
	case webhookapi.OpTest:
		return w.test(ctx, tenant, req.ID)
	case webhookapi.OpDeliveries:
		return w.deliveries(ctx, tenant, req)
	}
	return webhookapi.Reply{}, fmt.Errorf("%w: no operation %q", errInvalid, op)
}

// hookIDRE matches a webhook's ID.
var hookIDRE = regexp.MustCompile(`^wh_[0-9a-f]{32}$`)

// add adds a webhook of tenant, with a fresh secret shown this once.
func (w *webhooks) add(ctx context.Context, tenant string, req webhookapi.Request) (webhookapi.Reply, error) {
	if _, err := checkURL(req.URL, w.cfg.AllowPrivate); err != nil {
		return webhookapi.Reply{}, fmt.Errorf("%w: %w", errInvalid, err)
	}
	events := req.Events
	if len(events) == 0 {
		events = webhookapi.Events()
	}
	for _, ev := range events {
		if !webhookapi.ValidEvent(ev) {
			return webhookapi.Reply{}, fmt.Errorf("%w: event %q: want one of %s", errInvalid, ev, strings.Join(webhookapi.Events(), ", "))
		}
	}
	slices.Sort(events)
	events = slices.Compact(events)
	have, err := w.list(ctx, tenant)
	if err != nil {
		return webhookapi.Reply{}, err
	}
	if len(have) >= maxWebhooks {
		return webhookapi.Reply{}, fmt.Errorf("%w: the tenant has %d webhooks, the most it may: remove one first (corral webhooks rm)", errInvalid, len(have))
	}
	h := hookRecord{
		Webhook: webhookapi.Webhook{ID: "wh_" + strings.ReplaceAll(uuid.Must(uuid.NewV7()).String(), "-", ""), URL: req.URL, Events: events, CreatedAt: time.Now().UTC()},
		Tenant:  tenant,
	}
	// Kept sealed, and answered this once: no later answer has it.
	secret := newSecret()
	h.Sealed = w.box.Seal(secret, h.key())
	b, err := json.Marshal(h)
	if err != nil {
		return webhookapi.Reply{}, err
	}
	if _, err := w.kv.Create(ctx, hookKey(tenant, h.ID), b); err != nil {
		return webhookapi.Reply{}, err
	}
	// Taken in at once, not when the watch brings it: an event right
	// after is posted to it.
	w.hooks.apply(hookKey(tenant, h.ID), jetstream.KeyValuePut, b)
	w.log.InfoContext(ctx, "webhook added", "tenant", tenant, "webhook", h.ID, "url", redactURL(h.URL), "events", h.Events)
	return webhookapi.Reply{Webhook: &h.Webhook, Secret: secret}, nil
}

// list returns tenant's webhooks as the bucket holds them now, oldest
// first.
func (w *webhooks) list(ctx context.Context, tenant string) ([]*hookRecord, error) {
	keys, err := w.kv.ListKeysFiltered(ctx, tenant+".>")
	if err != nil {
		return nil, err
	}
	var out []*hookRecord
	for key := range keys.Keys() {
		_, id, _ := strings.Cut(key, ".")
		h, err := w.get(ctx, tenant, id)
		if errors.Is(err, errNoWebhook) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	slices.SortFunc(out, func(a, b *hookRecord) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

// get returns webhook id of tenant.
func (w *webhooks) get(ctx context.Context, tenant, id string) (*hookRecord, error) {
	if id == "" {
		return nil, fmt.Errorf("%w: name the webhook by its ID (corral webhooks ls lists them)", errInvalid)
	}
	e, err := w.kv.Get(ctx, hookKey(tenant, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("%w: %s", errNoWebhook, id)
	}
	if err != nil {
		return nil, err
	}
	var h hookRecord
	if err := json.Unmarshal(e.Value(), &h); err != nil {
		return nil, fmt.Errorf("webhook %s: %w", id, err)
	}
	h.Tenant, h.ID = tenant, id
	return &h, nil
}

// test posts a test event to webhook id of tenant once, and records and
// returns the attempt.
func (w *webhooks) test(ctx context.Context, tenant, id string) (webhookapi.Reply, error) {
	h, err := w.get(ctx, tenant, id)
	if err != nil {
		return webhookapi.Reply{}, err
	}
	p, msgID := testPayload(tenant)
	body, err := json.Marshal(p)
	if err != nil {
		return webhookapi.Reply{}, err
	}
	d := w.attempt(ctx, h, webhookapi.Delivery{Webhook: h.ID, MessageID: msgID, Event: p.Type, Attempt: 1}, body)
	if d.Outcome == webhookapi.Retrying {
		d.Outcome = webhookapi.Failed // a test is tried once
	}
	if err := w.record(ctx, tenant, d); err != nil {
		return webhookapi.Reply{}, err
	}
	return webhookapi.Reply{Deliveries: []webhookapi.Delivery{d}}, nil
}

// maxDeliveries bounds what one request lists.
const maxDeliveries = 1000

// deliveries returns the newest attempts to deliver tenant's webhooks
// (req.ID's alone, when set), oldest first.
func (w *webhooks) deliveries(ctx context.Context, tenant string, req webhookapi.Request) (webhookapi.Reply, error) {
	n := req.Limit
	switch {
	case n == 0:
		n = 50
	case n < 0 || n > maxDeliveries:
		return webhookapi.Reply{}, fmt.Errorf("%w: limit %d: want 1 to %d", errInvalid, n, maxDeliveries)
	}
	filter := bus.WebhookDeliverySubject(tenant, "*", "*")
	if req.ID != "" {
		filter = bus.WebhookDeliverySubject(tenant, req.ID, "*")
	}
	msgs, err := bus.ReadAll(ctx, w.js, bus.StreamWebhooks, filter)
	if err != nil {
		return webhookapi.Reply{}, err
	}
	out := webhookapi.Reply{Deliveries: []webhookapi.Delivery{}}
	for _, m := range msgs[max(len(msgs)-n, 0):] {
		var d webhookapi.Delivery
		if err := json.Unmarshal(m.Data, &d); err != nil {
			continue // not one the gateway wrote
		}
		out.Deliveries = append(out.Deliveries, d)
	}
	return out, nil
}
