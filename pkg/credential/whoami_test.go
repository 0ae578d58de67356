package credential

import (
	"errors"
	"slices"
	"testing"
)

func TestIdentify(t *testing.T) {
	const id = "c-0123456789abcdef0123456789abcdef"
	of := func(tenant, user string, role Role) Credential {
		return Credential{ID: id, Tenant: tenant, User: user, Role: role}
	}
	cases := []struct {
		name string
		c    Credential
		want Credential
	}{
		{"user", of("acme", "ada", RoleUser), of("acme", "ada", RoleUser)},
		{"bot", of("acme", "slack", RoleBot), of("acme", "", RoleBot)},
		{"reviewer", of("initech", "rita", RoleReviewer), of("initech", "rita", RoleReviewer)},
		{"operator", of(AllTenants, "olga", RoleOperator), of(AllTenants, "", RoleOperator)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.c.Permissions()
			got, err := Identify(id, p)
			if err != nil || got != tc.want {
				t.Errorf("Identify(permissions of %+v) = %+v, %v; want %+v", tc.c, got, err, tc.want)
			}
			// The server lists them in an order of its own.
			slices.Reverse(p.Publish)
			if got, err := Identify(id, p); err != nil || got != tc.want {
				t.Errorf("Identify(permissions of %+v, reversed) = %+v, %v; want %+v", tc.c, got, err, tc.want)
			}
		})
	}

	bot := of("acme", "slack", RoleBot).Permissions()
	more := bot
	more.Publish = append(slices.Clone(bot.Publish), "requests.initech.*.*")
	less := bot
	less.Publish = slices.DeleteFunc(slices.Clone(bot.Publish), func(s string) bool { return s == UserInfoSubject })
	otherInbox := bot
	otherInbox.Subscribe = []string{"_INBOX.>"}
	var harness Permissions
	for _, s := range Services() {
		if s.User == UserHarness {
			harness = s.Permissions
		}
	}
	refused := []struct {
		name string
		p    Permissions
	}{
		{"no permissions", Permissions{}},
		{"a service's", harness},
		{"a bot's and another tenant's requests", more},
		{"a bot's but one", less},
		{"a bot's hearing every inbox", otherInbox},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			if c, err := Identify(id, tc.p); !errors.Is(err, ErrInvalid) {
				t.Errorf("Identify = %+v, %v; want an error wrapping ErrInvalid", c, err)
			}
		})
	}
}
