package approval

import (
	"crypto/ed25519"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"corral.dev/pkg/credential"
	"corral.dev/pkg/envconf"
	"corral.dev/pkg/event"
	"corral.dev/pkg/policy"
)

// Config is the approval service's configuration, read from the
// environment by [LoadConfig].
type Config struct {
	// NATSURL is the NATS server to connect to (CORRAL_NATS_URL).
	NATSURL string
	// SigningKey signs every decision (CORRAL_APPROVAL_SIGNING_KEY, the
	// base64 seed, or CORRAL_APPROVAL_SIGNING_KEY_FILE, a file holding
	// it). The harness verifies with its public half.
	SigningKey ed25519.PrivateKey
	// Listen is where the reviewers' web page is served
	// (CORRAL_APPROVAL_LISTEN); empty serves none.
	Listen string
	// Reviewers maps the page's sign-in tokens to reviewers' names
	// (CORRAL_REVIEWER_TOKENS: "alice=token1,bob=token2"). The API takes
	// no token: its reviewer is its subject's user.
	Reviewers map[string]string
	// ReviewerHeader, when set, is a request header an authenticating
	// proxy in front of the page sets to the signed-in reviewer's name
	// (CORRAL_REVIEWER_HEADER, e.g. X-Forwarded-User). Set it only when
	// every request comes through that proxy.
	ReviewerHeader string
	// Timeout is how long an approval may wait for a decision before it
	// is denied (CORRAL_APPROVAL_TIMEOUT, a Go duration; empty: it
	// waits until someone decides or the session is stopped).
	Timeout time.Duration
	// Sweep is how often expired approvals are looked for.
	Sweep time.Duration
	// Concurrency is how many approval requests are handled at once.
	Concurrency int
	// Metrics is where the service's metrics are registered (none are
	// served when nil).
	Metrics prometheus.Registerer
	// Prices price each model turn the sessions console shows: the price
	// table of CORRAL_POLICY_FILE (the harness's and the gateway's), or
	// the default one.
	Prices *policy.Policy
	// Clients is the account the API's requests must come from, through
	// its imports ([credential.AccountClients]); empty takes them from
	// anywhere, for tests on a server without accounts.
	Clients string
}

// LoadConfig reads the configuration from getenv; an error names the
// offending variable.
func LoadConfig(getenv func(string) string) (Config, error) {
	cfg := Config{
		NATSURL:        envconf.NATSURL(getenv),
		Listen:         getenv("CORRAL_APPROVAL_LISTEN"),
		ReviewerHeader: getenv("CORRAL_REVIEWER_HEADER"),
		Reviewers:      make(map[string]string),
		Sweep:          time.Second,
		Concurrency:    16,
		Clients:        credential.AccountClients,
	}
	var err error
	if cfg.SigningKey, err = event.LoadPrivateKey(getenv, "CORRAL_APPROVAL_SIGNING_KEY"); err != nil {
		return Config{}, err
	}
	if cfg.SigningKey == nil {
		return Config{}, fmt.Errorf("CORRAL_APPROVAL_SIGNING_KEY (or _FILE) is not set: the approval service signs every decision with it (corral keygen makes one)")
	}
	if s := getenv("CORRAL_REVIEWER_TOKENS"); s != "" {
		for _, pair := range strings.Split(s, ",") {
			name, token, ok := strings.Cut(strings.TrimSpace(pair), "=")
			if !ok || name == "" || len(token) < 16 {
				return Config{}, fmt.Errorf("CORRAL_REVIEWER_TOKENS: want name=token pairs separated by commas, each token at least 16 characters")
			}
			cfg.Reviewers[token] = name
		}
	}
	if cfg.Timeout, err = envconf.Duration(getenv, "CORRAL_APPROVAL_TIMEOUT", 0); err != nil {
		return Config{}, err
	}
	if file := getenv("CORRAL_POLICY_FILE"); file != "" {
		if cfg.Prices, err = policy.Load(file); err != nil {
			return Config{}, fmt.Errorf("CORRAL_POLICY_FILE: %w", err)
		}
	}
	return cfg, nil
}
