package bus_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
)

// A user token stands for any user, dots, slashes and all, as one subject
// token, and reads back as the same user.
func TestUserTokenRoundTrip(t *testing.T) {
	t.Parallel()
	for _, user := range []string{
		"alice",
		"alice@example.com",
		"a.b.c",
		"team/alice",
		"../../etc",
		"Élodie Müller",
		"日本語のユーザー",
		"emoji 🐄",
		"*",
		">",
		"a b\tc\n",
		"u-YWxpY2U",
	} {
		tok := bus.UserToken(user)
		if strings.ContainsAny(tok, ".*> \t\r\n") || !strings.HasPrefix(tok, "u-") {
			t.Errorf("UserToken(%q) = %q, not one subject token", user, tok)
		}
		got, err := bus.ParseUserToken(tok)
		if err != nil || got != user {
			t.Errorf("ParseUserToken(UserToken(%q)) = %q, %v; want the user back", user, got, err)
		}
		id := uuid.New()
		if want := "requests.acme." + id.String() + "." + tok; bus.RequestSubject("acme", id, user) != want {
			t.Errorf("RequestSubject for %q = %q, want %q", user, bus.RequestSubject("acme", id, user), want)
		}
	}
	if a, b := bus.UserToken("alice"), bus.UserToken("Alice"); a == b {
		t.Errorf("alice and Alice share the token %q", a)
	}
}

func TestParseUserTokenRejects(t *testing.T) {
	t.Parallel()
	for _, tok := range []string{
		"",
		"alice",
		"u-",                     // no user
		"U-YWxpY2U",              // prefix is lower case
		"x-YWxpY2U",              // not a user token
		"u-YWxpY2U=",             // padded
		"u-YWxpY2U.",             // a dot
		"u-YR",                   // non-zero trailing bits: not how "a" is written
		"u-YW+pY2U",              // standard, not URL, alphabet
		"u-YW/pY2U",              // likewise
		"u-!!!!",                 // not base64
		"u-YWxp Y2U",             // a space
		"harness",                // a service's writer token
		bus.UserToken("a") + "x", // one character too many
	} {
		if got, err := bus.ParseUserToken(tok); !errors.Is(err, bus.ErrBadUserToken) {
			t.Errorf("ParseUserToken(%q) = %q, %v; want ErrBadUserToken", tok, got, err)
		}
	}
}

// A request/reply API's subject says who a request speaks for: a user
// by their token, the tenant's own scope by VaultTenantScope; anything
// else is refused.
func TestAPICaller(t *testing.T) {
	for _, tc := range []struct {
		subject, tenant, user string
		ok                    bool
	}{
		{bus.WebhookAPI("acme", bus.UserToken("ada"), "ls"), "acme", "ada", true},
		{bus.WebhookAPI("acme", bus.VaultTenantScope, "add"), "acme", "", true},
		{bus.WebhookAPI("acme", "ada", "ls"), "", "", false},
		{bus.WebhookAPI("Not a tenant", bus.UserToken("ada"), "ls"), "", "", false},
		{bus.VaultAPI("acme", bus.UserToken("ada"), "ls"), "", "", false}, // another API's
		{"corral.webhook.acme." + bus.UserToken("ada"), "", "", false},
	} {
		tenant, user, err := bus.APICaller(tc.subject, "webhook")
		if (err == nil) != tc.ok || tenant != tc.tenant || user != tc.user {
			t.Errorf("bus.APICaller(%q) = %q, %q, %v; want %q, %q, ok %v", tc.subject, tenant, user, err, tc.tenant, tc.user, tc.ok)
		}
	}
}
