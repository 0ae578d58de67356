package main

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
)

// hostAuth is a credential's auth of Corral's kind, which the SDK's types
// do not name: sent as the SDK sends any field beyond them.
func hostAuth(auth map[string]any) option.RequestOption { return option.WithJSONSet("auth", auth) }

const vaultSecret = "ghp-s3cret-of-the-forge"

// sdkVault makes a vault and a credential with the SDK as reviewer, sees
// user refused doing either, and user reading both, without the secret.
func sdkVault(t *testing.T, user, reviewer anthropic.Client) (*anthropic.BetaManagedAgentsVault, *anthropic.BetaManagedAgentsCredential) {
	t.Helper()
	ctx := context.Background()
	params := anthropic.BetaVaultNewParams{DisplayName: "forge", Metadata: map[string]string{"team": "infra"}}
	_, err := user.Beta.Vaults.New(ctx, params)
	wantAPIError(t, "a user making a vault", err, http.StatusForbidden, "permission_error")
	vault, err := reviewer.Beta.Vaults.New(ctx, params)
	if err != nil {
		t.Fatalf("make a vault: %v", err)
	}
	_, err = reviewer.Beta.Vaults.Credentials.New(ctx, vault.ID, anthropic.BetaVaultCredentialNewParams{Auth: anthropic.BetaVaultCredentialNewParamsAuthUnion{
		OfStaticBearer: &anthropic.BetaManagedAgentsStaticBearerCreateParams{Token: vaultSecret, MCPServerURL: "https://mcp.example.com/", Type: "static_bearer"},
	}})
	if ae := wantAPIError(t, "a credential for an MCP server", err, http.StatusBadRequest, "invalid_request_error"); !strings.Contains(ae.RawJSON(), "not supported") {
		t.Errorf("the refusal says %s, want it to say what is not supported", ae.RawJSON())
	}
	auth := map[string]any{"type": "corral_host", "allowed_hosts": []string{"git.example.com"}, "basic_user": "x-access-token", "secret_value": vaultSecret}
	_, err = user.Beta.Vaults.Credentials.New(ctx, vault.ID, anthropic.BetaVaultCredentialNewParams{}, hostAuth(auth))
	wantAPIError(t, "a user making a credential", err, http.StatusForbidden, "permission_error")
	cred, err := reviewer.Beta.Vaults.Credentials.New(ctx, vault.ID, anthropic.BetaVaultCredentialNewParams{DisplayName: anthropic.String("git")}, hostAuth(auth))
	if err != nil {
		t.Fatalf("make a credential: %v", err)
	}
	if cred.VaultID != vault.ID || cred.Auth.Type != "corral_host" || strings.Contains(cred.RawJSON(), vaultSecret) {
		t.Errorf("the credential made: %s", cred.RawJSON())
	}
	// The user reads them, and no answer holds the secret.
	vaults, err := user.Beta.Vaults.List(ctx, anthropic.BetaVaultListParams{})
	if err != nil || len(vaults.Data) != 1 || vaults.Data[0].ID != vault.ID || vaults.Data[0].Metadata["team"] != "infra" {
		t.Fatalf("the user lists vaults: %v %+v", err, vaults)
	}
	creds, err := user.Beta.Vaults.Credentials.List(ctx, vault.ID, anthropic.BetaVaultCredentialListParams{})
	if err != nil || len(creds.Data) != 1 || creds.Data[0].ID != cred.ID || strings.Contains(creds.RawJSON(), vaultSecret) {
		t.Fatalf("the user lists the vault's credentials: %v %+v", err, creds)
	}
	got, err := user.Beta.Vaults.Credentials.Get(ctx, cred.ID, anthropic.BetaVaultCredentialGetParams{VaultID: vault.ID})
	if err != nil || got.DisplayName != "git" || strings.Contains(got.RawJSON(), vaultSecret) {
		t.Fatalf("the user reads the credential: %v %s", err, got.RawJSON())
	}
	return vault, cred
}

// requestedVaults checks that the harness recorded the session's first
// request restricted to vault: what the sandbox-manager tells egress.
func requestedVaults(t *testing.T, js jetstream.JetStream, session, vault string) {
	t.Helper()
	msgs, err := bus.ReadAll(context.Background(), js, bus.StreamEvents, "events.acme."+session+".session.requested.harness")
	if err != nil || len(msgs) == 0 {
		t.Fatalf("the session's requests: %v, %d", err, len(msgs))
	}
	var first event.SessionRequested
	if err := json.Unmarshal(msgs[0].Data, &first); err != nil || !slices.Equal(first.Vaults, []string{vault}) {
		t.Errorf("the session's first request: vaults %v (%v), want [%s]", first.Vaults, err, vault)
	}
}

// otherTenantsVaultCalls are the calls of every vault endpoint on a
// vault of another tenant: reads by user, changes by reviewer (whose role
// may change its own tenant's).
func otherTenantsVaultCalls(ctx context.Context, user, reviewer anthropic.Client, vault, cred string) []struct {
	what string
	call func() error
} {
	auth := hostAuth(map[string]any{"type": "corral_host", "allowed_hosts": []string{"git.example.com"}, "header": "Authorization", "secret_value": "x"})
	return []struct {
		what string
		call func() error
	}{
		{"get the vault", func() error { _, err := user.Beta.Vaults.Get(ctx, vault, anthropic.BetaVaultGetParams{}); return err }},
		{"change the vault", func() error {
			_, err := reviewer.Beta.Vaults.Update(ctx, vault, anthropic.BetaVaultUpdateParams{DisplayName: anthropic.String("mine")})
			return err
		}},
		{"archive the vault", func() error {
			_, err := reviewer.Beta.Vaults.Archive(ctx, vault, anthropic.BetaVaultArchiveParams{})
			return err
		}},
		{"delete the vault", func() error {
			_, err := reviewer.Beta.Vaults.Delete(ctx, vault, anthropic.BetaVaultDeleteParams{})
			return err
		}},
		{"list the vault's credentials", func() error {
			_, err := user.Beta.Vaults.Credentials.List(ctx, vault, anthropic.BetaVaultCredentialListParams{})
			return err
		}},
		{"add a credential to the vault", func() error {
			_, err := reviewer.Beta.Vaults.Credentials.New(ctx, vault, anthropic.BetaVaultCredentialNewParams{}, auth)
			return err
		}},
		{"get the credential", func() error {
			_, err := user.Beta.Vaults.Credentials.Get(ctx, cred, anthropic.BetaVaultCredentialGetParams{VaultID: vault})
			return err
		}},
		{"change the credential", func() error {
			_, err := reviewer.Beta.Vaults.Credentials.Update(ctx, cred, anthropic.BetaVaultCredentialUpdateParams{VaultID: vault, DisplayName: anthropic.String("mine")})
			return err
		}},
		{"archive the credential", func() error {
			_, err := reviewer.Beta.Vaults.Credentials.Archive(ctx, cred, anthropic.BetaVaultCredentialArchiveParams{VaultID: vault})
			return err
		}},
		{"delete the credential", func() error {
			_, err := reviewer.Beta.Vaults.Credentials.Delete(ctx, cred, anthropic.BetaVaultCredentialDeleteParams{VaultID: vault})
			return err
		}},
	}
}
