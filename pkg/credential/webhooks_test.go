package credential

import (
	"slices"
	"testing"

	"corral.dev/pkg/bus"
)

// A client lists its own tenant's webhooks as itself; only a reviewer's or
// an operator's credential reaches the tenant's own scope, where webhooks
// are added, removed and tested; no one reaches another tenant's.
func TestWebhookAPIPermissions(t *testing.T) {
	t.Parallel()
	perms := func(role Role) Permissions { return Credential{Tenant: "acme", User: "ada", Role: role}.Permissions() }
	ada, bot, rita, op := perms(RoleUser), perms(RoleBot), perms(RoleReviewer), perms(RoleOperator)
	own := bus.WebhookAPI("acme", bus.UserToken("ada"), "ls")
	tenant := bus.WebhookAPI("acme", bus.VaultTenantScope, "add")
	tests := []struct {
		name    string
		p       Permissions
		subject string
		want    bool
	}{
		{"user: list", ada, own, true},
		{"user: as another user", ada, bus.WebhookAPI("acme", bus.UserToken("bob"), "ls"), false},
		{"user: add", ada, tenant, false},
		{"user: another tenant's", ada, bus.WebhookAPI("initech", bus.UserToken("ada"), "ls"), false},
		{"bot: list", bot, own, true},
		{"bot: add", bot, tenant, false},
		{"reviewer: list", rita, own, true},
		{"reviewer: add", rita, tenant, true},
		{"reviewer: another tenant's", rita, bus.WebhookAPI("initech", bus.VaultTenantScope, "add"), false},
		{"operator: add", op, tenant, true},
		{"reviewer: the webhooks' bucket", rita, "$KV." + bus.BucketWebhooks + ".acme.wh_1", false},
		{"reviewer: read the bucket", rita, "$JS.API.DIRECT.GET.KV_" + bus.BucketWebhooks + ".$KV." + bus.BucketWebhooks + ".acme.wh_1", false},
		{"reviewer: a delivery record", rita, bus.WebhookDeliverySubject("acme", "wh_1", "msg_1"), false},
		{"reviewer: the webhook consumer", rita, "$JS.API.CONSUMER.CREATE." + bus.StreamEvents + "." + bus.ConsumerGatewayWebhooks + ".events.acme.>", false},
	}
	for _, tc := range tests {
		if got := tc.p.mayPublish(tc.subject); got != tc.want {
			t.Errorf("%s: publish on %s allowed = %v, want %v", tc.name, tc.subject, got, tc.want)
		}
	}
	if !slices.Contains(ClientImports(), bus.WebhookAPI("*", "*", ">")) {
		t.Errorf("ClientImports lacks %s", bus.WebhookAPI("*", "*", ">"))
	}
}

// Only the gateway reads and writes the webhooks' bucket, which holds
// their secrets, records deliveries and answers the webhook API.
func TestWebhooksAreTheGatewaysAlone(t *testing.T) {
	t.Parallel()
	bucket := "$JS.API.DIRECT.GET.KV_" + bus.BucketWebhooks + ".$KV." + bus.BucketWebhooks + ".acme.wh_1"
	consumer := "$JS.API.CONSUMER.CREATE.KV_" + bus.BucketWebhooks + ".peek"
	for _, s := range Services() {
		p := s.Permissions
		gateway := s.User == UserGateway
		for _, subject := range []string{bucket, consumer, "$KV." + bus.BucketWebhooks + ".acme.wh_1", bus.WebhookDeliverySubject("acme", "wh_1", "msg_1")} {
			if got := p.mayPublish(subject); got != gateway {
				t.Errorf("%s: publish on %s allowed = %v, want %v", s.User, subject, got, gateway)
			}
		}
		if got := slices.Contains(p.Subscribe, bus.WebhookAPI("*", "*", ">")); got != gateway {
			t.Errorf("%s: answers the webhook API = %v, want %v", s.User, got, gateway)
		}
	}
}
