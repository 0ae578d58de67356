// Package credentialtest issues clients' credentials for tests, as corral
// credentials issue does.
package credentialtest

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
)

// Issue keeps a new credential of user of tenant, with role, in the
// credentials bucket through js (an administrator's), and returns it with
// its secret. It fails the test if it cannot.
func Issue(t testing.TB, js jetstream.JetStream, tenant, user string, role credential.Role) (credential.Credential, string) {
	t.Helper()
	ctx := context.Background()
	c, secret, err := credential.New(tenant, user, role, "test")
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, bus.BucketCredentials)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(&c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, c.ID, b); err != nil {
		t.Fatal(err)
	}
	return c, secret
}
