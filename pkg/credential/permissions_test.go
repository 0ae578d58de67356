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

// maySubscribe reports whether p lets a client subscribe to subject, a
// literal subject or a wildcard: a wildcard is allowed only when an allowed
// one covers it whole, as the server checks.
func (p Permissions) maySubscribe(subject string) bool {
	for _, a := range p.Subscribe {
		if server.SubjectMatchesFilter(subject, a) {
			return true
		}
	}
	return false
}

// A client hears the live output of its own tenant's sessions, and no
// other tenant's; only the harness and the sandbox-manager publish it.
func TestLivePermissions(t *testing.T) {
	t.Parallel()
	ada := Credential{Tenant: "acme", User: "ada", Role: RoleUser}.Permissions()
	bot := Credential{Tenant: "acme", User: "bridge", Role: RoleBot}.Permissions()
	olga := Credential{Tenant: AllTenants, User: "olga", Role: RoleOperator}.Permissions()
	session := "0190a4b2-0000-7000-8000-000000000000"
	tests := []struct {
		name    string
		p       Permissions
		subject string
		want    bool
	}{
		{"user: own tenant's session", ada, "live.acme." + session, true},
		{"user: own tenant's sessions", ada, bus.LiveFilter("acme"), true},
		{"user: another tenant's session", ada, "live.initech." + session, false},
		{"user: every tenant's", ada, bus.LiveFilter("*"), false},
		{"user: everything live", ada, "live.>", false},
		{"bot: own tenant's session", bot, "live.acme." + session, true},
		{"bot: another tenant's session", bot, "live.initech." + session, false},
		{"operator: any tenant's", olga, "live.initech." + session, true},
	}
	for _, tc := range tests {
		if got := tc.p.maySubscribe(tc.subject); got != tc.want {
			t.Errorf("%s: subscribe to %s allowed = %v, want %v", tc.name, tc.subject, got, tc.want)
		}
		if tc.p.mayPublish(tc.subject) {
			t.Errorf("%s: may publish on %s", tc.name, tc.subject)
		}
	}
	for _, s := range Services() {
		want := s.User == UserHarness || s.User == UserSandbox
		if got := s.Permissions.mayPublish("live.acme." + session); got != want {
			t.Errorf("%s: publish live output allowed = %v, want %v", s.User, got, want)
		}
	}
}

// A client reads its own tenant's entries of the session index, which only
// the gateway writes, and reads and writes its own tenant's records of the
// gateway's bucket (a user's: every agent read, its own agents and
// sessions alone written), none of another tenant's.
func TestGatewayBucketPermissions(t *testing.T) {
	t.Parallel()
	ada := Credential{Tenant: "acme", User: "ada", Role: RoleUser}.Permissions()
	bot := Credential{Tenant: "acme", User: "bridge", Role: RoleBot}.Permissions()
	grace := Credential{Tenant: "acme", User: "grace", Role: RoleReviewer}.Permissions()
	olga := Credential{Tenant: AllTenants, User: "olga", Role: RoleOperator}.Permissions()
	session := "0190a4b2-0000-7000-8000-000000000000"
	sessions := func(user string) string {
		return "$KV." + bus.BucketGateway + ".acme.session." + bus.UserToken(user) + ".*"
	}
	sessionRecord := func(user string) string {
		return "$KV." + bus.BucketGateway + ".acme.session." + bus.UserToken(user) + "." + session
	}
	index := func(tenant string) string { return "$KV." + bus.BucketSessions + "." + tenant + "." + session }
	record := func(tenant string) string { return "$KV." + bus.BucketGateway + "." + tenant + ".agent.agent_1" }
	agent := func(user string) string {
		return "$KV." + bus.BucketGateway + ".acme.agent." + bus.UserToken(user) + ".agent_1_" + bus.UserToken(user)
	}
	get := func(bucket, key string) string { return "$JS.API.DIRECT.GET.KV_" + bucket + "." + key }
	consumer := func(bucket, filter string) string { return "$JS.API.CONSUMER.CREATE.KV_" + bucket + ".c1." + filter }
	tests := []struct {
		name    string
		p       Permissions
		subject string
		want    bool
	}{
		{"user: read own tenant's index entry", ada, get(bus.BucketSessions, index("acme")), true},
		{"user: list own tenant's index", ada, consumer(bus.BucketSessions, "$KV."+bus.BucketSessions+".acme.>"), true},
		{"user: write the index", ada, index("acme"), false},
		{"user: read another tenant's index entry", ada, get(bus.BucketSessions, index("initech")), false},
		{"user: list every tenant's index", ada, consumer(bus.BucketSessions, "$KV."+bus.BucketSessions+".>"), false},
		{"user: read own tenant's record", ada, get(bus.BucketGateway, record("acme")), true},
		{"user: list own tenant's agents", ada, consumer(bus.BucketGateway, "$KV."+bus.BucketGateway+".acme.agent.>"), true},
		// A user's agents are its own: an agent's system prompt and
		// always_ask tools apply to every session of it.
		{"user: write own agent", ada, agent("ada"), true},
		{"user: read another user's agent", ada, get(bus.BucketGateway, agent("bob")), true},
		{"user: write another user's agent", ada, agent("bob"), false},
		{"user: write an agent that has no owner", ada, record("acme"), false},
		{"bot: write any user's agent", bot, agent("bob"), true},
		{"reviewer: write any user's agent", grace, agent("bob"), true},
		{"reviewer: write an agent that has no owner", grace, record("acme"), true},
		{"operator: write any user's agent", olga, agent("bob"), true},
		{"user: write another tenant's record", ada, record("initech"), false},
		{"user: read another tenant's record", ada, get(bus.BucketGateway, record("initech")), false},
		{"bot: write another tenant's record", bot, record("initech"), false},
		// A user's sessions are its own: a record of one not yet started
		// says what its first request starts from, and as whom. A delete
		// is a publish on the key too.
		{"user: write own session's record", ada, sessionRecord("ada"), true},
		{"user: read own session's record", ada, get(bus.BucketGateway, sessionRecord("ada")), true},
		{"user: list own sessions", ada, consumer(bus.BucketGateway, sessions("ada")), true},
		{"user: write another user's session's record", ada, sessionRecord("bob"), false},
		{"user: read another user's session's record", ada, get(bus.BucketGateway, sessionRecord("bob")), false},
		{"user: list another user's sessions", ada, consumer(bus.BucketGateway, sessions("bob")), false},
		{"user: list every user's sessions", ada, consumer(bus.BucketGateway, "$KV."+bus.BucketGateway+".acme.session.*.*"), false},
		{"user: write a record outside any user's sessions", ada, "$KV." + bus.BucketGateway + ".acme.session." + session, false},
		{"bot: write any user's session's record", bot, sessionRecord("bob"), true},
		{"bot: list every user's sessions", bot, consumer(bus.BucketGateway, "$KV."+bus.BucketGateway+".acme.session.*.*"), true},
		{"reviewer: read any user's session's record", grace, get(bus.BucketGateway, sessionRecord("bob")), true},
		{"operator: write any user's session's record", olga, sessionRecord("bob"), true},
		{"bot: write the index", bot, index("acme"), false},
	}
	for _, tc := range tests {
		if got := tc.p.mayPublish(tc.subject); got != tc.want {
			t.Errorf("%s: publish on %s allowed = %v, want %v", tc.name, tc.subject, got, tc.want)
		}
	}
	for _, s := range Services() {
		want := s.User == UserGateway
		if got := s.Permissions.mayPublish(index("acme")); got != want {
			t.Errorf("%s: write the session index allowed = %v, want %v", s.User, got, want)
		}
	}
}

// The sessions console's stops (requests.<tenant>.<session>.console) are
// the approval service's alone: no client may send one, whatever its
// role, though each still sends its own requests.
func TestConsoleStopsAreTheApprovalServicesAlone(t *testing.T) {
	t.Parallel()
	session := "0190a4b2-0000-7000-8000-000000000000"
	for _, c := range []Credential{
		{Tenant: "acme", User: "ada", Role: RoleUser},
		{Tenant: "acme", User: "bridge", Role: RoleBot},
		{Tenant: "acme", User: "rita", Role: RoleReviewer},
		{Tenant: AllTenants, User: "olga", Role: RoleOperator},
	} {
		p := c.Permissions()
		if p.mayPublish("requests.acme." + session + "." + bus.ConsoleToken) {
			t.Errorf("%s's credential (%s) may send the console's stops", c.User, c.Role)
		}
		if !p.mayPublish("requests.acme." + session + "." + bus.UserToken("ada")) {
			t.Errorf("%s's credential (%s) may not send ada's requests", c.User, c.Role)
		}
	}
	for _, s := range Services() {
		want := s.User == UserApproval
		if got := s.Permissions.mayPublish("requests.acme." + session + "." + bus.ConsoleToken); got != want {
			t.Errorf("%s: send the console's stops allowed = %v, want %v", s.User, got, want)
		}
	}
}
