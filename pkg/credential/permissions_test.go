package credential

import (
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"corral.dev/pkg/bus"
)

// mayPublish reports whether p lets a client publish on subject.
func (p Permissions) mayPublish(subject string) bool {
	for _, d := range p.Deny {
		if server.SubjectMatchesFilter(subject, d) {
			return false
		}
	}
	for _, a := range p.Publish {
		if server.SubjectMatchesFilter(subject, a) {
			return true
		}
	}
	return false
}

// A client stages uploads, and reads them back, under its own tenant and
// its own user (a bot, any user of its tenant), and nowhere else; it
// never reads the uploads stream otherwise.
func TestUploadPermissions(t *testing.T) {
	t.Parallel()
	ada := Credential{Tenant: "acme", User: "ada", Role: RoleUser}.Permissions()
	bot := Credential{Tenant: "acme", User: "bridge", Role: RoleBot}.Permissions()
	blob := strings.Repeat("0f", 32)
	chunk := func(tenant, user string) string { return bus.UploadSubject(tenant, bus.UserToken(user), blob, 3) }
	read := func(subject string) string { return "$JS.API.DIRECT.GET." + bus.StreamUploads + "." + subject }
	tests := []struct {
		name    string
		p       Permissions
		subject string
		want    bool
	}{
		{"user: own", ada, chunk("acme", "ada"), true},
		{"user: read own", ada, read(chunk("acme", "ada")), true},
		{"user: another user's", ada, chunk("acme", "bob"), false},
		{"user: read another user's", ada, read(chunk("acme", "bob")), false},
		{"user: another tenant's", ada, chunk("initech", "ada"), false},
		{"user: read another tenant's", ada, read(chunk("initech", "ada")), false},
		{"user: read every user's", ada, read("uploads.acme.>"), false},
		{"user: batched read", ada, "$JS.API.DIRECT.GET." + bus.StreamUploads, false},
		{"user: stored message get", ada, "$JS.API.STREAM.MSG.GET." + bus.StreamUploads, false},
		{"user: stream info", ada, "$JS.API.STREAM.INFO." + bus.StreamUploads, false},
		{"user: purge", ada, "$JS.API.STREAM.PURGE." + bus.StreamUploads, false},
		{"user: a consumer", ada, "$JS.API.CONSUMER.CREATE." + bus.StreamUploads + ".x." + chunk("acme", "ada"), false},
		{"bot: any user's", bot, chunk("acme", "bob"), true},
		{"bot: read any user's", bot, read(chunk("acme", "bob")), true},
		{"bot: another tenant's", bot, chunk("initech", "bob"), false},
		{"bot: read another tenant's", bot, read(chunk("initech", "bob")), false},
	}
	for _, tc := range tests {
		if got := tc.p.mayPublish(tc.subject); got != tc.want {
			t.Errorf("%s: publish on %s allowed = %v, want %v", tc.name, tc.subject, got, tc.want)
		}
	}
	// The server's imports carry them to the services' account.
	for _, want := range []string{bus.UploadFilter("*", "*"), "$JS.API.DIRECT.GET." + bus.StreamUploads + "." + bus.UploadFilter("*", "*")} {
		found := false
		for _, s := range ClientImports() {
			found = found || s == want
		}
		if !found {
			t.Errorf("ClientImports lacks %s", want)
		}
	}
}
