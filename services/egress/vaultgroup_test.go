package egress

import (
	"context"
	"strings"
	"testing"

	"corral.dev/pkg/egressapi"
)

// A session that names vaults (groups) gets their credentials alone: not
// another group's bound to the host it asks, nor the user's own, nor an
// ungrouped one of the tenant; a session naming none gets every one that
// binds the host, as before.
func TestSessionNamingVaultsGetsTheirCredentialsAlone(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	tenant := func(op string) string { return egressapi.TenantVaultSubject("acme", op) }
	bearer := egressapi.Injection{Header: "Authorization", Prefix: "Bearer "}
	for _, v := range []egressapi.VaultRequest{
		{Vault: egressapi.Vault{Name: "a-files", Group: "vlt_a", Hosts: []string{"files.example.test"}, Inject: bearer}, Secret: "secret-of-a"},
		{Vault: egressapi.Vault{Name: "b-api", Group: "vlt_b", Hosts: []string{"api.example.test"}, Inject: bearer}, Secret: "secret-of-b"},
	} {
		if _, e := f.vault(tenant(egressapi.OpCreate), v); e != "" {
			t.Fatal(e)
		}
	}
	if _, e := f.vault(egressapi.VaultSubject("acme", "ada", egressapi.OpCreate), egressapi.VaultRequest{
		Vault: egressapi.Vault{Name: "mine", Hosts: []string{"api.example.test"}, Inject: bearer}, Secret: "secret-of-ada",
	}); e != "" {
		t.Fatal(e)
	}
	ask := func(id egressapi.Identity) string {
		t.Helper()
		r, err := f.control().Open(ctx, id)
		if err != nil || !r.Network {
			t.Fatalf("open %+v: %+v, %v", id, r, err)
		}
		before := len(f.up.Authorizations())
		if code, body, _ := f.get(f.client(r.Dir), "GET", "https://api.example.test/repo", ""); code != 200 {
			t.Fatalf("GET: %d %s", code, body)
		}
		// The upstream keeps the authorizations it received, none for a
		// request without.
		if got := f.up.Authorizations(); len(got) > before {
			return got[before]
		}
		return ""
	}
	onlyA := identity("acme", "ada")
	onlyA.Vaults = []string{"vlt_a"}
	if got := ask(onlyA); got != "" {
		t.Errorf("a session restricted to vault A sent %q to B's host; want no credential", got)
	}
	onlyB := identity("acme", "ada")
	onlyB.Vaults = []string{"vlt_a", "vlt_b"}
	if got := ask(onlyB); got != "Bearer secret-of-b" {
		t.Errorf("a session naming vault B sent %q; want B's credential", got)
	}
	if got := ask(identity("acme", "ada")); got != "Bearer secret-of-ada" {
		t.Errorf("a session naming no vault sent %q; want the user's own first, as before", got)
	}
	// Archived, B's credential goes nowhere, and is still listed, without
	// its secret; it can be neither rotated nor changed.
	archived, e := f.vault(tenant(egressapi.OpArchive), egressapi.VaultRequest{Vault: egressapi.Vault{Name: "b-api"}})
	if e != "" || archived.Vault.ArchivedAt.IsZero() {
		t.Fatalf("archive: %+v %s", archived.Vault, e)
	}
	if got := ask(onlyB); got != "" {
		t.Errorf("an archived credential was sent: %q", got)
	}
	if _, e := f.vault(tenant(egressapi.OpRotate), egressapi.VaultRequest{Vault: egressapi.Vault{Name: "b-api"}, Secret: "again"}); !strings.Contains(e, "archived") {
		t.Errorf("rotating an archived vault: %q", e)
	}
}

func TestVaultUpdateAndGroups(t *testing.T) {
	f := newFixture(t)
	bearer := egressapi.Injection{Header: "Authorization", Prefix: "Bearer "}
	made, e := f.vault(egressapi.TenantVaultSubject("acme", egressapi.OpCreate), egressapi.VaultRequest{
		Vault:  egressapi.Vault{Name: "c1", Group: "vlt_a", Label: "forge", Metadata: map[string]string{"team": "x"}, Hosts: []string{"api.example.test"}, Inject: bearer},
		Secret: "s3cret-one",
	})
	if e != "" || made.Vault.Group != "vlt_a" || made.Vault.Label != "forge" || made.Vault.UpdatedAt.IsZero() {
		t.Fatalf("create: %+v %s", made.Vault, e)
	}
	up, e := f.vault(egressapi.TenantVaultSubject("acme", egressapi.OpUpdate), egressapi.VaultRequest{Vault: egressapi.Vault{Name: "c1", Label: "forge 2"}})
	if e != "" || up.Vault.Label != "forge 2" || up.Vault.Metadata != nil || up.Vault.Version != 1 || up.Vault.Group != "vlt_a" {
		t.Errorf("update of the label: %+v %s", up.Vault, e)
	}
	up, e = f.vault(egressapi.TenantVaultSubject("acme", egressapi.OpUpdate), egressapi.VaultRequest{Vault: egressapi.Vault{Name: "c1", Label: "forge 2"}, Secret: "s3cret-two"})
	if e != "" || up.Vault.Version != 2 {
		t.Errorf("update of the secret: %+v %s", up.Vault, e)
	}
	for _, tc := range []struct {
		name, subject string
		req           egressapi.VaultRequest
		want          string
	}{
		{"a user's vault in a group", egressapi.VaultSubject("acme", "ada", egressapi.OpCreate),
			egressapi.VaultRequest{Vault: egressapi.Vault{Name: "c2", Group: "vlt_a", Hosts: []string{"api.example.test"}, Inject: bearer}, Secret: "s"}, "400 invalid: vault c2: only the tenant's"},
		{"a bad group", egressapi.TenantVaultSubject("acme", egressapi.OpCreate),
			egressapi.VaultRequest{Vault: egressapi.Vault{Name: "c2", Group: "A B", Hosts: []string{"api.example.test"}, Inject: bearer}, Secret: "s"}, "400 invalid: group"},
		{"a label over lines", egressapi.TenantVaultSubject("acme", egressapi.OpUpdate),
			egressapi.VaultRequest{Vault: egressapi.Vault{Name: "c1", Label: "a\nb"}}, "400 invalid: label"},
		{"too much metadata", egressapi.TenantVaultSubject("acme", egressapi.OpUpdate),
			egressapi.VaultRequest{Vault: egressapi.Vault{Name: "c1", Metadata: map[string]string{"": "x"}}}, "400 invalid: metadata"},
	} {
		if _, e := f.vault(tc.subject, tc.req); !strings.HasPrefix(e, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, e, tc.want)
		}
	}
}
