package slackbridge

import (
	"cmp"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"

	"corral.dev/pkg/envconf"
	"corral.dev/pkg/event"
)

// DefaultAPIURL is the Slack Web API's base URL.
const DefaultAPIURL = "https://slack.com/api"

// Secret is a credential: it logs and prints redacted.
type Secret string

// LogValue redacts the secret.
func (Secret) LogValue() slog.Value { return slog.StringValue("[redacted]") }

// String redacts the secret.
func (Secret) String() string { return "[redacted]" }

// Config is the bridge's configuration, read from the environment by
// [LoadConfig].
type Config struct {
	// NATSURL is the platform's NATS server (CORRAL_NATS_URL).
	NATSURL string
	// SigningSecret checks that every request comes from Slack
	// (CORRAL_SLACK_SIGNING_SECRET, from the app's Basic Information).
	SigningSecret Secret
	// BotToken authenticates the bridge's Web API calls
	// (CORRAL_SLACK_BOT_TOKEN, xoxb-...).
	BotToken Secret
	// Listen is where Slack's requests are served (CORRAL_SLACK_LISTEN).
	Listen string
	// APIURL is the Web API's base URL (CORRAL_SLACK_API_URL).
	APIURL string
	// Tenant is the tenant of sessions from a workspace Teams does not
	// name (CORRAL_SLACK_TENANT; by default "default" when
	// CORRAL_SLACK_TEAMS is not set, and none when it is: a workspace it
	// does not name is then refused).
	Tenant string
	// Teams maps Slack team IDs to tenants (CORRAL_SLACK_TEAMS:
	// "T123=acme,T456=globex").
	Teams map[string]string
	// Credentials are the client credentials the bridge signs in with,
	// one per tenant it serves (CORRAL_SLACK_CREDENTIALS:
	// "acme=c-...:secret,globex=c-...:secret", or the same pairs a line
	// each in the file CORRAL_SLACK_CREDENTIALS_FILE). Each is a bot's
	// of its tenant, or a reviewer's when Reviewers names anyone:
	// everything the bridge does for a workspace it does signed in with
	// the credential of the workspace's tenant.
	Credentials map[string]Login
	// Reviewers maps Slack user IDs to reviewers' names
	// (CORRAL_SLACK_REVIEWERS: "U123:grace,U456:heidi"): only they may
	// click Approve or Deny. A click is decided as the reviewer of the
	// tenant's credential, its reason naming who clicked.
	Reviewers map[string]string
	// Model is the model of the sessions the bridge starts
	// (CORRAL_SLACK_MODEL; empty: the harness's default).
	Model string
}

// LoadConfig reads the configuration from getenv; an error names the
// offending variable.
func LoadConfig(getenv func(string) string) (Config, error) {
	cfg := Config{
		NATSURL:       envconf.NATSURL(getenv),
		SigningSecret: Secret(strings.TrimSpace(getenv("CORRAL_SLACK_SIGNING_SECRET"))),
		BotToken:      Secret(strings.TrimSpace(getenv("CORRAL_SLACK_BOT_TOKEN"))),
		Listen:        cmp.Or(getenv("CORRAL_SLACK_LISTEN"), "127.0.0.1:7482"),
		APIURL:        strings.TrimRight(cmp.Or(getenv("CORRAL_SLACK_API_URL"), DefaultAPIURL), "/"),
		Tenant:        getenv("CORRAL_SLACK_TENANT"),
		Teams:         make(map[string]string),
		Reviewers:     make(map[string]string),
		Model:         getenv("CORRAL_SLACK_MODEL"),
	}
	if cfg.SigningSecret == "" {
		return Config{}, fmt.Errorf("CORRAL_SLACK_SIGNING_SECRET is not set: the Slack app's signing secret (Basic Information → App Credentials)")
	}
	if cfg.BotToken == "" {
		return Config{}, fmt.Errorf("CORRAL_SLACK_BOT_TOKEN is not set: the Slack app's bot token (OAuth & Permissions → Bot User OAuth Token, xoxb-...)")
	}
	if !strings.HasPrefix(string(cfg.BotToken), "xoxb-") {
		return Config{}, fmt.Errorf("CORRAL_SLACK_BOT_TOKEN: want a bot token, xoxb-...")
	}
	if u, err := url.Parse(cfg.APIURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return Config{}, fmt.Errorf("CORRAL_SLACK_API_URL=%q: want an http(s) URL such as %s", cfg.APIURL, DefaultAPIURL)
	}
	if getenv("CORRAL_SLACK_REVIEWER_TOKEN") != "" {
		return Config{}, fmt.Errorf("CORRAL_SLACK_REVIEWER_TOKEN is no longer read: clicks are decided as the reviewer of each tenant's credential in CORRAL_SLACK_CREDENTIALS (corral credentials issue --tenant T --reviewer); unset it")
	}
	if err := cfg.loadTenants(getenv); err != nil {
		return Config{}, err
	}
	if err := cfg.loadCredentials(getenv); err != nil {
		return Config{}, err
	}
	if s := getenv("CORRAL_SLACK_REVIEWERS"); s != "" {
		for _, pair := range strings.Split(s, ",") {
			user, name, ok := strings.Cut(strings.TrimSpace(pair), ":")
			if !ok || user == "" || strings.TrimSpace(name) == "" {
				return Config{}, fmt.Errorf("CORRAL_SLACK_REVIEWERS: want SLACK_USER_ID:name pairs separated by commas, such as U0123:grace")
			}
			cfg.Reviewers[user] = strings.TrimSpace(name)
		}
	}
	return cfg, nil
}

// Tenants returns the tenants a bridge configured by getenv serves: those
// of CORRAL_SLACK_TEAMS, and CORRAL_SLACK_TENANT's. It is what
// CORRAL_SLACK_CREDENTIALS must have a credential for.
func Tenants(getenv func(string) string) ([]string, error) {
	var cfg Config
	if err := cfg.loadTenants(getenv); err != nil {
		return nil, err
	}
	return cfg.tenants(), nil
}

// loadTenants reads CORRAL_SLACK_TENANT and CORRAL_SLACK_TEAMS.
func (c *Config) loadTenants(getenv func(string) string) error {
	c.Tenant, c.Teams = getenv("CORRAL_SLACK_TENANT"), make(map[string]string)
	if s := getenv("CORRAL_SLACK_TEAMS"); s != "" {
		for _, pair := range strings.Split(s, ",") {
			team, tenant, ok := strings.Cut(strings.TrimSpace(pair), "=")
			if !ok || team == "" {
				return fmt.Errorf("CORRAL_SLACK_TEAMS: want TEAM_ID=tenant pairs separated by commas, such as T0123=acme")
			}
			if err := event.CheckTenant(tenant); err != nil {
				return fmt.Errorf("CORRAL_SLACK_TEAMS: %s: %w", team, err)
			}
			c.Teams[team] = tenant
		}
	}
	if c.Tenant == "" && len(c.Teams) == 0 {
		c.Tenant = "default"
	}
	if c.Tenant != "" {
		if err := event.CheckTenant(c.Tenant); err != nil {
			return fmt.Errorf("CORRAL_SLACK_TENANT: %w", err)
		}
	}
	return nil
}

// tenants returns the tenants the bridge serves, sorted.
func (c *Config) tenants() []string {
	var out []string
	if c.Tenant != "" {
		out = append(out, c.Tenant)
	}
	for _, t := range c.Teams {
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out
}

// tenant returns the tenant of a Slack workspace, and false for a
// workspace of none.
func (c *Config) tenant(team string) (string, bool) {
	if t, ok := c.Teams[team]; ok {
		return t, true
	}
	return c.Tenant, c.Tenant != ""
}
