package gateway

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/natstest"
)

// TestRecordsAllowNoRollup checks that a publish on one tenant's record,
// which that tenant's clients may make, cannot roll the bucket up and
// purge every other tenant's records: the server may not refuse that by
// subject, so the bucket's stream refuses roll-ups, even where the bucket
// was made before with them allowed.
func TestRecordsAllowNoRollup(t *testing.T) {
	t.Parallel()
	_, _, js := natstest.Run(t)
	ctx := context.Background()
	// Made as a KV bucket is by default, roll-ups allowed.
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bus.BucketGateway}); err != nil {
		t.Fatal(err)
	}
	if err := Setup(ctx, js); err != nil {
		t.Fatal(err)
	}
	theirs := recordKey("initech", kindAgent, "agent_1")
	if err := writeRecord(ctx, js, theirs, agentRecord{ID: "agent_1", Name: "theirs"}, 0); err != nil {
		t.Fatal(err)
	}
	for _, rollup := range []string{jetstream.MsgRollupAll, jetstream.MsgRollupSubject} {
		m := nats.NewMsg(recordSubject(recordKey("acme", kindAgent, "agent_2")))
		m.Header.Set(jetstream.MsgRollup, rollup)
		m.Header.Set("KV-Operation", "PURGE")
		if _, err := js.PublishMsg(ctx, m); err == nil {
			t.Errorf("a roll-up (%s) of the records was taken", rollup)
		}
	}
	var a agentRecord
	if _, err := readRecord(ctx, js, theirs, &a); err != nil || a.Name != "theirs" {
		t.Errorf("initech's agent after acme's roll-ups: %+v, %v", a, err)
	}
}
