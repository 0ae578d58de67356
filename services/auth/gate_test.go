package auth

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
)

// A client's consumers go through the gate: pull consumers only, each
// going away after the idle bound, and at most MaxConsumers of a
// credential's on a stream at once; another credential's count is its own,
// and a request that did not come from a client is refused.
func TestConsumerGate(t *testing.T) {
	p := startWith(t, map[string]string{"CORRAL_AUTH_MAX_CONSUMERS": "3", "CORRAL_AUTH_CONSUMER_IDLE": "30s"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	connect := func(user string) (credential.Credential, jetstream.JetStream) {
		t.Helper()
		cred, secret := p.issue(t, "acme", user, credential.RoleUser)
		js, err := jetstream.New(p.mustConnect(t, cred.ID, secret).Conn)
		if err != nil {
			t.Fatal(err)
		}
		return cred, js
	}
	ada, adaJS := connect("ada")
	_, bobJS := connect("bob")
	create := func(js jetstream.JetStream, idle time.Duration) (jetstream.Consumer, error) {
		return js.CreateConsumer(ctx, bus.StreamEvents, jetstream.ConsumerConfig{FilterSubject: "events.acme.>", InactiveThreshold: idle})
	}

	var mine []jetstream.Consumer
	for i := range 3 {
		c, err := create(adaJS, 24*time.Hour)
		if err != nil {
			t.Fatalf("ada's consumer %d: %v", i+1, err)
		}
		mine = append(mine, c)
	}
	info := mine[0].CachedInfo()
	if info.Config.Metadata[OwnerKey] != ada.ID || info.Config.InactiveThreshold != 30*time.Second {
		t.Errorf("ada's consumer: owner %q, idle %s; want %s, 30s", info.Config.Metadata[OwnerKey], info.Config.InactiveThreshold, ada.ID)
	}
	if _, err := create(adaJS, 0); err == nil || !strings.Contains(err.Error(), "the most it may have") {
		t.Errorf("ada's fourth consumer: %v, want refused", err)
	}
	if _, err := create(bobJS, 0); err != nil {
		t.Errorf("bob's first consumer: %v", err)
	}
	if err := adaJS.DeleteConsumer(ctx, bus.StreamEvents, mine[0].CachedInfo().Name); err != nil {
		t.Fatal(err)
	}
	if _, err := create(adaJS, 0); err != nil {
		t.Errorf("ada's consumer after deleting one: %v", err)
	}

	// A read leaves no consumer behind: bob, with one, reads more times
	// than he may have consumers.
	if _, err := p.js.Publish(ctx, "events.acme."+uuid.NewString()+".session.requested.harness", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if msgs, err := bus.ReadByConsumer(ctx, bobJS, bus.StreamEvents, "events.acme.>", 0); err != nil || len(msgs) != 1 {
			t.Fatalf("bob's read %d: %d messages, %v", i+1, len(msgs), err)
		}
	}

	// A push consumer, whose deliveries would go where its creator says.
	push, _ := json.Marshal(map[string]any{"stream_name": bus.StreamEvents, "config": map[string]any{
		"name": "push", "deliver_subject": "requests.initech.x.y", "filter_subject": "events.acme.>"}})
	msg, err := bobJS.Conn().RequestWithContext(ctx, bus.ConsumerCreate+bus.StreamEvents+".push.events.acme.>", push)
	if err != nil || !strings.Contains(string(msg.Data), "only pull consumers") {
		t.Errorf("a push consumer: %v %s, want refused", err, msgData(msg))
	}
	// The gate's subject, asked within the services' account: no
	// client's record, so no consumer.
	msg, err = p.admin.RequestWithContext(ctx, bus.ConsumerGate+bus.StreamEvents+".x.events.acme.>", []byte(`{"config":{"filter_subject":"events.acme.>"}}`))
	if err != nil || !strings.Contains(string(msg.Data), `"code":403`) {
		t.Errorf("the gate asked in the services' account: %v %s, want refused", err, msgData(msg))
	}
}

// msgData is m's body, if there is m.
func msgData(m *nats.Msg) string {
	if m == nil {
		return ""
	}
	return string(m.Data)
}
