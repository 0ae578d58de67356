package auth

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
	"corral.dev/pkg/natstest"
)

func TestSignIn(t *testing.T) {
	p := start(t, DefaultTTL)
	ada, secret := p.issue(t, "acme", "ada", credential.RoleUser)
	revoked, revokedSecret := p.issue(t, "acme", "bob", credential.RoleUser)
	if err := p.kv.Purge(context.Background(), revoked.ID); err != nil {
		t.Fatal(err)
	}
	deleted, deletedSecret := p.issue(t, "acme", "cy", credential.RoleUser)
	if err := p.kv.Delete(context.Background(), deleted.ID); err != nil {
		t.Fatal(err)
	}
	unknown, unknownSecret, err := credential.New("acme", "dee", credential.RoleUser, "never issued")
	if err != nil {
		t.Fatal(err)
	}
	// A credential whose role is none kept under its ID, and one kept
	// under another's ID.
	bad, badSecret := p.issue(t, "acme", "eve", credential.RoleUser)
	bad.Role = "admin"
	p.put(t, bad.ID, bad)
	moved, movedSecret := p.issue(t, "acme", "fay", credential.RoleUser)
	other, _, err := credential.New("acme", "gus", credential.RoleUser, "")
	if err != nil {
		t.Fatal(err)
	}
	p.put(t, other.ID, moved)

	tests := []struct {
		name, user, password string
		ok                   bool
	}{
		{"right secret", ada.ID, secret, true},
		{"wrong secret", ada.ID, secret + "x", false},
		{"another's secret", ada.ID, revokedSecret, false},
		{"no secret", ada.ID, "", false},
		{"unknown ID", unknown.ID, unknownSecret, false},
		{"purged credential", revoked.ID, revokedSecret, false},
		{"deleted credential", deleted.ID, deletedSecret, false},
		{"invalid credential", bad.ID, badSecret, false},
		{"credential under another ID", other.ID, movedSecret, false},
		{"not an ID", "ada", secret, false},
		{"service user's name", credential.UserHarness, secret, false},
	}
	t.Run("connect", func(t *testing.T) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				c, err := p.connect(t, tc.user, tc.password)
				switch {
				case tc.ok && err != nil:
					t.Fatalf("connect: %v, want connected", err)
				case !tc.ok && err == nil:
					c.Close()
					t.Fatal("connected, want refused")
				case !tc.ok && !errors.Is(err, nats.ErrAuthorization):
					t.Fatalf("connect: %v, want %v", err, nats.ErrAuthorization)
				}
			})
		}
	})
	// A service user's name is the server's to check: the auth service
	// is not asked.
	if got, want := decisions(t, p.reg), map[string]float64{"allowed": 1, "denied": float64(len(tests) - 2)}; !maps.Equal(got, want) {
		t.Errorf("decisions = %v, want %v", got, want)
	}
}

func TestRevokedCredentialIsCutOff(t *testing.T) {
	const ttl = 2 * time.Second
	p := start(t, ttl)
	kept, keptSecret := p.issue(t, "acme", "ada", credential.RoleUser)
	revoked, revokedSecret := p.issue(t, "acme", "bob", credential.RoleUser)

	var mu sync.Mutex
	reconnects := make(map[string]int)
	reconnected := nats.ReconnectHandler(func(nc *nats.Conn) {
		mu.Lock()
		defer mu.Unlock()
		reconnects[nc.Opts.User]++
	})
	opts := []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond), reconnected}
	k := p.mustConnect(t, kept.ID, keptSecret, opts...)
	r := p.mustConnect(t, revoked.ID, revokedSecret, opts...)
	if err := p.kv.Purge(context.Background(), revoked.ID); err != nil {
		t.Fatal(err)
	}

	// Within the TTL, the server cuts the revoked credential off, and
	// does not let it back in: the client gives up.
	start := time.Now()
	natstest.WaitFor(t, ttl+5*time.Second, func() error {
		if s := r.Status(); s != nats.CLOSED {
			return fmt.Errorf("revoked credential's connection is %s, want %s", s, nats.CLOSED)
		}
		return nil
	})
	t.Logf("revoked credential cut off after %s; last error: %v", time.Since(start).Round(100*time.Millisecond), r.LastError())
	if err := r.LastError(); !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("last error of the revoked credential's connection: %v, want %v", err, nats.ErrAuthorization)
	}
	mu.Lock()
	if n := reconnects[revoked.ID]; n != 0 {
		t.Errorf("revoked credential reconnected %d times", n)
	}
	mu.Unlock()

	// The other was let back in each time its sign-in expired.
	natstest.WaitFor(t, ttl+5*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if reconnects[kept.ID] == 0 {
			return errors.New("kept credential not reconnected")
		}
		return nil
	})
	subject := bus.RequestSubject("acme", uuid.Must(uuid.NewV7()), "ada")
	natstest.WaitFor(t, 5*time.Second, func() error { return p.mayPublish(t, k, subject) })
}
