package credential

import (
	"testing"

	"corral.dev/pkg/bus"
)

// Any client of a tenant reads its environments; only a reviewer's or an
// operator's credential changes them, on the tenant's own subject, since
// an environment decides what its sessions may reach on the network.
func TestEnvironmentPermissions(t *testing.T) {
	t.Parallel()
	roles := map[string]Permissions{
		"user":     Credential{Tenant: "acme", User: "ada", Role: RoleUser}.Permissions(),
		"bot":      Credential{Tenant: "acme", User: "bridge", Role: RoleBot}.Permissions(),
		"reviewer": Credential{Tenant: "acme", User: "grace", Role: RoleReviewer}.Permissions(),
		"operator": Credential{Tenant: AllTenants, User: "ops", Role: RoleOperator}.Permissions(),
	}
	read := bus.EnvironmentAPI("acme", bus.UserToken("ada"), "ls")
	write := bus.EnvironmentAPI("acme", bus.VaultTenantScope, "put")
	tests := []struct {
		role, subject string
		want          bool
	}{
		{"user", read, true},
		{"user", write, false},
		{"user", bus.EnvironmentAPI("acme", bus.UserToken("bob"), "ls"), false},
		{"user", bus.EnvironmentAPI("initech", bus.UserToken("ada"), "ls"), false},
		{"bot", read, true},
		{"bot", write, false},
		{"reviewer", read, true},
		{"reviewer", write, true},
		{"reviewer", bus.EnvironmentAPI("initech", bus.VaultTenantScope, "put"), false},
		{"operator", write, true},
	}
	for _, tc := range tests {
		if got := roles[tc.role].mayPublish(tc.subject); got != tc.want {
			t.Errorf("%s: publish on %s allowed = %v, want %v", tc.role, tc.subject, got, tc.want)
		}
	}
	// The sandbox-managers answer it, and alone write the bucket.
	for _, s := range Services() {
		answers, writes := false, false
		for _, sub := range s.Permissions.Subscribe {
			answers = answers || sub == bus.EnvironmentAPI("*", "*", ">")
		}
		for _, pub := range s.Permissions.Publish {
			writes = writes || pub == "$KV."+bus.BucketEnvironments+".>"
		}
		if (s.User == UserSandbox) != answers || (s.User == UserSandbox) != writes {
			t.Errorf("%s: answers the environment API %v, writes the environments %v", s.User, answers, writes)
		}
	}
}
