package slackbridge

import (
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	"corral.dev/pkg/event"
)

// DefaultAPIURL is the Slack Web API's base URL.
const DefaultAPIURL = "https://slack.com/api"

// Secret is a credential: it logs redacted.
type Secret string

// LogValue redacts the secret.
func (Secret) LogValue() slog.Value { return slog.StringValue("[redacted]") }

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
	// name (CORRAL_SLACK_TENANT, default "default").
	Tenant string
	// Teams maps Slack team IDs to tenants (CORRAL_SLACK_TEAMS:
	// "T123=acme,T456=globex").
	Teams map[string]string
	// Reviewers maps Slack user IDs to reviewers' names
	// (CORRAL_SLACK_REVIEWERS: "U123:grace,U456:heidi"): only they may
	// click Approve or Deny.
	Reviewers map[string]string
	// ReviewerToken is the reviewer token the bridge decides with, through
	// the approval service (CORRAL_SLACK_REVIEWER_TOKEN). The decision is
	// recorded in that token's reviewer's name, its reason naming who
	// clicked.
	ReviewerToken Secret
	// Model is the model of the sessions the bridge starts
	// (CORRAL_SLACK_MODEL; empty: the harness's default).
	Model string
}

// LoadConfig reads the configuration from getenv; an error names the
// offending variable.
func LoadConfig(getenv func(string) string) (Config, error) {
	cfg := Config{
		NATSURL:       or(getenv("CORRAL_NATS_URL"), "nats://127.0.0.1:4222"),
		SigningSecret: Secret(strings.TrimSpace(getenv("CORRAL_SLACK_SIGNING_SECRET"))),
		BotToken:      Secret(strings.TrimSpace(getenv("CORRAL_SLACK_BOT_TOKEN"))),
		Listen:        or(getenv("CORRAL_SLACK_LISTEN"), "127.0.0.1:7482"),
		APIURL:        strings.TrimRight(or(getenv("CORRAL_SLACK_API_URL"), DefaultAPIURL), "/"),
		Tenant:        or(getenv("CORRAL_SLACK_TENANT"), "default"),
		Teams:         make(map[string]string),
		Reviewers:     make(map[string]string),
		ReviewerToken: Secret(strings.TrimSpace(getenv("CORRAL_SLACK_REVIEWER_TOKEN"))),
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
	if err := event.CheckTenant(cfg.Tenant); err != nil {
		return Config{}, fmt.Errorf("CORRAL_SLACK_TENANT: %w", err)
	}
	if s := getenv("CORRAL_SLACK_TEAMS"); s != "" {
		for _, pair := range strings.Split(s, ",") {
			team, tenant, ok := strings.Cut(strings.TrimSpace(pair), "=")
			if !ok || team == "" {
				return Config{}, fmt.Errorf("CORRAL_SLACK_TEAMS: want TEAM_ID=tenant pairs separated by commas, such as T0123=acme")
			}
			if err := event.CheckTenant(tenant); err != nil {
				return Config{}, fmt.Errorf("CORRAL_SLACK_TEAMS: %s: %w", team, err)
			}
			cfg.Teams[team] = tenant
		}
	}
	if s := getenv("CORRAL_SLACK_REVIEWERS"); s != "" {
		for _, pair := range strings.Split(s, ",") {
			user, name, ok := strings.Cut(strings.TrimSpace(pair), ":")
			if !ok || user == "" || strings.TrimSpace(name) == "" {
				return Config{}, fmt.Errorf("CORRAL_SLACK_REVIEWERS: want SLACK_USER_ID:name pairs separated by commas, such as U0123:grace")
			}
			cfg.Reviewers[user] = strings.TrimSpace(name)
		}
		if cfg.ReviewerToken == "" {
			return Config{}, fmt.Errorf("CORRAL_SLACK_REVIEWER_TOKEN is not set: CORRAL_SLACK_REVIEWERS names reviewers, and their decisions go to the approval service with a reviewer's token (one of CORRAL_REVIEWER_TOKENS)")
		}
	}
	return cfg, nil
}

// tenant returns the tenant of a Slack workspace.
func (c *Config) tenant(team string) string {
	if t, ok := c.Teams[team]; ok {
		return t
	}
	return c.Tenant
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
