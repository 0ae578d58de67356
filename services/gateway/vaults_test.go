package gateway

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"corral.dev/pkg/credential"
	"corral.dev/pkg/egressapi"
)

// TestCredentialAuth checks that a credential's auth is taken when it is
// Corral's kind, and otherwise refused with the API's error shape, saying
// what is not supported, or what is wrong: never dropped.
func TestCredentialAuth(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, auth string
		// want is what the error says; "" for an auth taken.
		want string
	}{
		{"a header", `{"type": "corral_host", "allowed_hosts": ["api.example.com"], "header": "Authorization", "prefix": "Bearer ", "secret_value": "s"}`, ""},
		{"basic authentication", `{"type": "corral_host", "allowed_hosts": ["github.com"], "path_prefixes": ["/acme/"], "basic_user": "x-access-token", "secret_value": "s"}`, ""},
		{"a static bearer for an MCP server", `{"type": "static_bearer", "token": "s", "mcp_server_url": "https://mcp.example.com"}`, "static_bearer: a credential for an MCP server"},
		{"OAuth for an MCP server", `{"type": "mcp_oauth", "access_token": "s", "mcp_server_url": "https://mcp.example.com"}`, "mcp_oauth: a credential for an MCP server"},
		{"an environment variable", `{"type": "environment_variable", "secret_name": "TOKEN", "secret_value": "s", "networking": {"type": "unrestricted"}}`, "environment_variable: a secret whose placeholder"},
		{"a type no one knows", `{"type": "kerberos"}`, `type "kerberos" is none Corral knows`},
		{"a field Corral does not know", `{"type": "corral_host", "allowed_hosts": ["a.example.com"], "header": "X", "secret_value": "s", "networking": {}}`, `"networking" is not supported`},
	}
	for _, tc := range tests {
		a, err := hostAuth(json.RawMessage(tc.auth))
		if tc.want == "" {
			if err != nil || a.SecretValue != "s" || len(a.AllowedHosts) != 1 {
				t.Errorf("%s: %+v, %v; want it taken", tc.name, a, err)
			}
			continue
		}
		var ae *apiError
		if !errors.As(err, &ae) || ae.status != http.StatusBadRequest || !strings.Contains(ae.msg, tc.want) {
			t.Errorf("%s: %v, want a 400 saying %q", tc.name, err, tc.want)
		}
	}
}

// TestCredentialShowsNoSecret checks that a credential as the API shows
// it holds everything of its Corral vault but the secret, which the
// vault API never answers with anyway.
func TestCredentialShowsNoSecret(t *testing.T) {
	t.Parallel()
	now := time.Now().UTC()
	v := egressapi.Vault{Name: "vcrd_1", Group: "vlt_1", Label: "forge", Hosts: []string{"github.com"},
		Inject: egressapi.Injection{BasicUser: "x-access-token"}, Version: 2, CreatedAt: now, RotatedAt: now.Add(time.Minute)}
	got, err := json.Marshal(credentialJSON(v))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"vault_credential","id":"vcrd_1","vault_id":"vlt_1","display_name":"forge","metadata":{},` +
		`"auth":{"type":"corral_host","allowed_hosts":["github.com"],"path_prefixes":[],"basic_user":"x-access-token"},` +
		`"created_at":"` + now.Format(time.RFC3339Nano) + `","updated_at":"` + now.Add(time.Minute).Format(time.RFC3339Nano) + `","archived_at":null}`
	if string(got) != want {
		t.Errorf("credential =\n%s\nwant\n%s", got, want)
	}
	var back map[string]any
	_ = json.Unmarshal(got, &back)
	for _, secret := range []string{"secret_value", "token", "secret"} {
		if _, ok := back["auth"].(map[string]any)[secret]; ok {
			t.Errorf("the credential shows %s", secret)
		}
	}
}

func TestPatchMetadata(t *testing.T) {
	t.Parallel()
	s := func(v string) *string { return &v }
	got, err := patchMetadata(map[string]string{"a": "1", "b": "2"}, map[string]*string{"a": nil, "c": s("3")})
	if err != nil || len(got) != 2 || got["b"] != "2" || got["c"] != "3" {
		t.Errorf("patch = %v, %v; want b and c", got, err)
	}
	many := map[string]*string{}
	for _, k := range strings.Split("a b c d e f g h i j k l m n o p q", " ") {
		many[k] = s("x")
	}
	for name, patch := range map[string]map[string]*string{
		"17 pairs":     many,
		"an empty key": {"": s("x")},
		"a long value": {"k": s(strings.Repeat("v", maxMetaValue+1))},
		"a long key":   {strings.Repeat("k", maxMetaKey+1): s("v")},
	} {
		if _, err := patchMetadata(nil, patch); err == nil {
			t.Errorf("%s: taken", name)
		}
	}
}

func TestPageOf(t *testing.T) {
	t.Parallel()
	all := []string{"a", "b", "c", "d", "e"}
	id := func(s string) string { return s }
	var got []string
	q := url.Values{"limit": {"2"}}
	for range 4 {
		page, err := pageOf(q, all, id, id)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, strings.Join(page.Data, ""))
		if page.NextPage == nil {
			break
		}
		q.Set("page", *page.NextPage)
	}
	if strings.Join(got, "|") != "ab|cd|e" {
		t.Errorf("pages %q, want ab|cd|e", got)
	}
	if _, err := pageOf(url.Values{"page": {"zz"}}, all, id, id); err == nil {
		t.Error("a page not of the list was taken")
	}
}

// TestOnlyReviewersAndOperatorsChangeVaults checks the refusal that a
// bot's key gets from the gateway, whose credential the server would let
// write the gateway's records, though not the tenant's vaults.
func TestOnlyReviewersAndOperatorsChangeVaults(t *testing.T) {
	t.Parallel()
	for role, may := range map[credential.Role]bool{credential.RoleReviewer: true, credential.RoleOperator: true, credential.RoleUser: false, credential.RoleBot: false} {
		err := mayChangeVaults(&caller{client: &client{cred: credential.Credential{Role: role}}})
		var ae *apiError
		if may != (err == nil) || !may && (!errors.As(err, &ae) || ae.status != http.StatusForbidden) {
			t.Errorf("%s: %v; want allowed %v, else a 403", role, err, may)
		}
	}
}
