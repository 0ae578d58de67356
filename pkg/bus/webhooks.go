package bus

import "time"

// WebhookAPI is the subject of operation op of the gateway's webhook API,
// as [VaultAPI]'s: listing as the user, and the changes (which send the
// tenant's session events to an outside server) under
// [VaultTenantScope], which only a reviewer's or an operator's credential
// may reach.
func WebhookAPI(tenant, user, op string) string {
	return "corral.webhook." + tenant + "." + user + "." + op
}

// BucketWebhooks holds each tenant's webhooks, <tenant>.<id>: where to
// send which session events, and the secret that signs them, sealed
// with the gateway's key (CORRAL_GATEWAY_WEBHOOK_KEY). Only the gateway
// reads or writes it (deploy/nats.conf): a webhook's secret is shown
// once, to whoever added it. The gateway's package sets it up.
const BucketWebhooks = "webhooks"

// StreamWebhooks records every attempt to deliver a webhook,
// [WebhookDeliverySubject], for corral webhooks deliveries. Written by
// the gateway alone, and bounded by age and size: it is a recent history,
// not an audit trail (the session logs are).
const StreamWebhooks = "WEBHOOKS"

// WebhookDeliverySubject is where the attempts to deliver message msgID
// (a webhook-id) to webhook hook of tenant are recorded:
// webhooks.<tenant>.<hook>.<msgID>. Its last message says whether the
// message is settled (delivered, or given up).
func WebhookDeliverySubject(tenant, hook, msgID string) string {
	return "webhooks." + tenant + "." + hook + "." + msgID
}

// WebhookHistory is how long [StreamWebhooks] keeps a delivery attempt.
const WebhookHistory = 7 * 24 * time.Hour

// ConsumerGatewayWebhooks is the gateway's consumer of the session events
// that webhooks announce, which it posts to each tenant's webhooks.
const ConsumerGatewayWebhooks = "gateway-webhooks"
