package auth

import (
	"context"
	"errors"
	"testing"
	"time"

	"corral.dev/pkg/credential"
)

// The server tells a client who the auth service signed it in as, and
// credential.Whoami reads the credential from its permissions.
func TestWhoami(t *testing.T) {
	p := start(t, DefaultTTL)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cases := []struct {
		tenant, user string
		role         credential.Role
		wantUser     string
	}{
		{"acme", "ada", credential.RoleUser, "ada"},
		{"acme", "slack", credential.RoleBot, ""},
		{"initech", "rita", credential.RoleReviewer, "rita"},
		{credential.AllTenants, "olga", credential.RoleOperator, ""},
	}
	for _, tc := range cases {
		t.Run(string(tc.role), func(t *testing.T) {
			cred, secret := p.issue(t, tc.tenant, tc.user, tc.role)
			c := p.mustConnect(t, cred.ID, secret)
			got, err := credential.Whoami(ctx, c.Conn)
			want := credential.Credential{ID: cred.ID, Tenant: tc.tenant, User: tc.wantUser, Role: tc.role}
			if err != nil || got != want {
				t.Errorf("Whoami = %+v, %v; want %+v", got, err, want)
			}
		})
	}
	t.Run("admin", func(t *testing.T) {
		if got, err := credential.Whoami(ctx, p.admin); !errors.Is(err, credential.ErrInvalid) {
			t.Errorf("Whoami of the admin = %+v, %v; want an error wrapping ErrInvalid", got, err)
		}
	})
}
