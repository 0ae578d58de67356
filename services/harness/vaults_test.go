package harness

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/egressapi"
	"corral.dev/pkg/event"
)

// A session's first request may restrict it to vaults of its tenant; the
// harness records them, and refuses a vault the tenant has not (another
// tenant's, one never made) or one archived, before the session starts.
func TestSessionVaultsAreTheTenants(t *testing.T) {
	js, _ := start(t, nil)
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bus.BucketGateway})
	if err != nil {
		t.Fatal(err)
	}
	archived := time.Now().UTC()
	for tenant, groups := range map[string][]egressapi.Group{
		"acme":    {{ID: "vlt_a", DisplayName: "a"}, {ID: "vlt_old", DisplayName: "old", ArchivedAt: &archived}},
		"initech": {{ID: "vlt_i", DisplayName: "i"}},
	} {
		for _, g := range groups {
			data, _ := json.Marshal(g)
			if _, err := kv.Put(ctx, egressapi.GroupKey(tenant, g.ID), data); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A record under one ID that says it is another is not that vault.
	data, _ := json.Marshal(egressapi.Group{ID: "vlt_a"})
	if _, err := kv.Put(ctx, egressapi.GroupKey("acme", "vlt_fake"), data); err != nil {
		t.Fatal(err)
	}
	request := func(vaults ...string) uuid.UUID {
		session := uuid.Must(uuid.NewV7())
		req := event.Request{Header: event.NewHeader(event.TypeRequest, "acme", session), User: "ada", Prompt: "hello", Vaults: vaults}
		if err := bus.Publish(ctx, js, bus.RequestSubject("acme", session, "ada"), req.ID.String(), &req); err != nil {
			t.Fatal(err)
		}
		return session
	}
	evs := ended(t, js, "acme", request("vlt_a"), 1)
	if r := ofType[*event.SessionRequested](evs); len(r) != 1 || !slices.Equal(r[0].Vaults, []string{"vlt_a"}) {
		t.Errorf("the session's request: %+v, want vault vlt_a recorded", r)
	}
	if done := ofType[*event.SessionCompleted](evs); len(done) != 1 {
		t.Errorf("the session restricted to its tenant's vault did not complete")
	}
	for _, tc := range []struct{ vault, want string }{
		{"vlt_i", "no such vault vlt_i in tenant acme"},
		{"vlt_none", "no such vault vlt_none in tenant acme"},
		{"vlt_fake", "no such vault vlt_fake"},
		{"vlt_old", "vault vlt_old is archived"},
	} {
		evs := ended(t, js, "acme", request("vlt_a", tc.vault), 1)
		f := failure(t, evs)
		if f.Code != event.CodeInvalidRequest || !strings.Contains(f.Reason, tc.want) || len(ofType[*event.SessionRequested](evs)) != 0 {
			t.Errorf("vault %s: %s %q, want the session refused with %q before it starts", tc.vault, f.Code, f.Reason, tc.want)
		}
	}
}
