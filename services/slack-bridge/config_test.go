package slackbridge_test

import (
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	slackbridge "corral.dev/services/slack-bridge"
)

func TestLoadConfig(t *testing.T) {
	id := func(n int) string { return fmt.Sprintf("c-%032x", n) }
	base := map[string]string{"CORRAL_SLACK_SIGNING_SECRET": "s", "CORRAL_SLACK_BOT_TOKEN": "xoxb-1", "CORRAL_SLACK_CREDENTIALS": "default=" + id(1) + ":pw1"}
	file := filepath.Join(t.TempDir(), "credentials")
	if err := os.WriteFile(file, []byte("# the bridge's credentials\nacme="+id(1)+":pw1\n\ninitech="+id(2)+":pw2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	teams := map[string]string{"CORRAL_SLACK_TEAMS": "T1=acme,T2=initech"}
	with := func(m map[string]string, kv ...string) map[string]string {
		out := maps.Clone(m)
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	cases := []struct {
		name    string
		env     map[string]string
		wantErr string
		want    map[string]string // tenant → credential ID
	}{
		{"ok", nil, "", map[string]string{"default": id(1)}},
		{"no secret", map[string]string{"CORRAL_SLACK_SIGNING_SECRET": ""}, "CORRAL_SLACK_SIGNING_SECRET", nil},
		{"no token", map[string]string{"CORRAL_SLACK_BOT_TOKEN": ""}, "CORRAL_SLACK_BOT_TOKEN", nil},
		{"user token", map[string]string{"CORRAL_SLACK_BOT_TOKEN": "xoxp-1"}, "CORRAL_SLACK_BOT_TOKEN", nil},
		{"bad api url", map[string]string{"CORRAL_SLACK_API_URL": "slack.com"}, "CORRAL_SLACK_API_URL", nil},
		{"bad tenant", map[string]string{"CORRAL_SLACK_TENANT": "Acme Inc"}, "CORRAL_SLACK_TENANT", nil},
		{"bad teams", map[string]string{"CORRAL_SLACK_TEAMS": "T1"}, "CORRAL_SLACK_TEAMS", nil},
		{"bad team tenant", map[string]string{"CORRAL_SLACK_TEAMS": "T1=A B"}, "CORRAL_SLACK_TEAMS", nil},
		{"bad reviewers", map[string]string{"CORRAL_SLACK_REVIEWERS": "U1=grace"}, "CORRAL_SLACK_REVIEWERS", nil},
		{"the reviewer token of old", map[string]string{"CORRAL_SLACK_REVIEWER_TOKEN": "slack-token-0123456789"}, "CORRAL_SLACK_REVIEWER_TOKEN", nil},
		{"no credentials", map[string]string{"CORRAL_SLACK_CREDENTIALS": ""}, "no credential for tenant default", nil},
		{"a tenant's per workspace", with(teams, "CORRAL_SLACK_CREDENTIALS", "acme="+id(1)+":pw1,initech="+id(2)+":pw2"), "",
			map[string]string{"acme": id(1), "initech": id(2)}},
		{"teams and a default tenant", with(teams, "CORRAL_SLACK_TENANT", "globex", "CORRAL_SLACK_CREDENTIALS", "acme="+id(1)+":pw1,initech="+id(2)+":pw2,globex="+id(3)+":pw3"), "",
			map[string]string{"acme": id(1), "initech": id(2), "globex": id(3)}},
		{"a workspace's tenant without one", with(teams, "CORRAL_SLACK_CREDENTIALS", "acme="+id(1)+":pw1"), "no credential for tenant initech", nil},
		{"a tenant of no workspace", with(teams, "CORRAL_SLACK_CREDENTIALS", "acme="+id(1)+":pw1,initech="+id(2)+":pw2,default="+id(3)+":pw3"), "tenant default, which no workspace is of", nil},
		{"a tenant twice", with(teams, "CORRAL_SLACK_CREDENTIALS", "acme="+id(1)+":pw1,acme="+id(2)+":pw2,initech="+id(3)+":pw3"), "tenant acme twice", nil},
		{"a credential for two tenants", with(teams, "CORRAL_SLACK_CREDENTIALS", "acme="+id(1)+":pw1,initech="+id(1)+":pw1"), "a credential has one tenant", nil},
		{"not a credential ID", map[string]string{"CORRAL_SLACK_CREDENTIALS": "default=admin:pw1"}, "want tenant=ID:secret", nil},
		{"no secret", map[string]string{"CORRAL_SLACK_CREDENTIALS": "default=" + id(1)}, "want tenant=ID:secret", nil},
		{"a file", with(teams, "CORRAL_SLACK_CREDENTIALS", "", "CORRAL_SLACK_CREDENTIALS_FILE", file), "",
			map[string]string{"acme": id(1), "initech": id(2)}},
		{"a file and the variable", with(teams, "CORRAL_SLACK_CREDENTIALS_FILE", file), "both set", nil},
		{"a missing file", map[string]string{"CORRAL_SLACK_CREDENTIALS": "", "CORRAL_SLACK_CREDENTIALS_FILE": file + ".missing"}, "CORRAL_SLACK_CREDENTIALS_FILE", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := maps.Clone(base)
			maps.Copy(env, tc.env)
			cfg, err := slackbridge.LoadConfig(func(k string) string { return env[k] })
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("error %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
			case err != nil && (strings.Contains(err.Error(), "pw1") || strings.Contains(err.Error(), "pw2")):
				t.Errorf("the error names a secret: %v", err)
			case tc.wantErr == "" && cfg.APIURL != slackbridge.DefaultAPIURL:
				t.Errorf("defaults: %+v", cfg)
			}
			if err != nil {
				return
			}
			got := map[string]string{}
			for tenant, l := range cfg.Credentials {
				got[tenant] = l.ID
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("credentials by tenant %v, want %v", got, tc.want)
			}
		})
	}
	cfg, _ := slackbridge.LoadConfig(func(k string) string { return base[k] })
	if cfg.Tenant != "default" {
		t.Errorf("the default tenant is %q, want default", cfg.Tenant)
	}
	for what, v := range map[string]any{"bot token": cfg.BotToken, "credentials": cfg.Credentials} {
		if s := fmt.Sprint(slog.Any(what, v).Value.Resolve()); strings.Contains(s, "xoxb") || strings.Contains(s, "pw1") {
			t.Errorf("the %s log as %s", what, s)
		}
	}
	tenants, err := slackbridge.Tenants(func(k string) string { return with(teams, "CORRAL_SLACK_TENANT", "globex")[k] })
	if want := []string{"acme", "globex", "initech"}; err != nil || !slices.Equal(tenants, want) {
		t.Errorf("Tenants = %v, %v; want %v", tenants, err, want)
	}
}
