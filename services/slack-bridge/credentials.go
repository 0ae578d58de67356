package slackbridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
	"corral.dev/pkg/event"
)

// Login is a client credential as the bridge signs in with it.
type Login struct {
	ID     string
	Secret Secret
}

// LogValue is the credential's ID alone.
func (l Login) LogValue() slog.Value { return slog.StringValue(l.ID) }

// loadCredentials reads CORRAL_SLACK_CREDENTIALS, or the file
// CORRAL_SLACK_CREDENTIALS_FILE names, after the tenants: one credential
// for each tenant served, and none for another. No error holds a secret.
func (c *Config) loadCredentials(getenv func(string) string) error {
	name, s := "CORRAL_SLACK_CREDENTIALS", getenv("CORRAL_SLACK_CREDENTIALS")
	if file := getenv("CORRAL_SLACK_CREDENTIALS_FILE"); file != "" {
		if s != "" {
			return errors.New("CORRAL_SLACK_CREDENTIALS and CORRAL_SLACK_CREDENTIALS_FILE are both set: give the credentials once")
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("CORRAL_SLACK_CREDENTIALS_FILE: %w", err)
		}
		name, s = "CORRAL_SLACK_CREDENTIALS_FILE", string(b)
	}
	c.Credentials = make(map[string]Login)
	tenantOf := make(map[string]string) // credential ID → tenant
	for _, pair := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '\n' || r == '\r' }) {
		pair = strings.TrimSpace(pair)
		if pair == "" || strings.HasPrefix(pair, "#") {
			continue
		}
		tenant, login, ok := strings.Cut(pair, "=")
		id, secret, ok2 := strings.Cut(login, ":")
		tenant, id, secret = strings.TrimSpace(tenant), strings.TrimSpace(id), strings.TrimSpace(secret)
		if !ok || !ok2 || !credential.IsID(id) || secret == "" {
			return fmt.Errorf("%s: want tenant=ID:secret pairs separated by commas, such as acme=c-0123…:SECRET (corral credentials issue --tenant acme --bot prints an ID and its secret)", name)
		}
		if err := event.CheckTenant(tenant); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if _, ok := c.Credentials[tenant]; ok {
			return fmt.Errorf("%s lists tenant %s twice", name, tenant)
		}
		if other, ok := tenantOf[id]; ok {
			return fmt.Errorf("%s lists credential %s for tenants %s and %s: a credential has one tenant", name, id, other, tenant)
		}
		c.Credentials[tenant], tenantOf[id] = Login{ID: id, Secret: Secret(secret)}, tenant
	}
	served := c.tenants()
	for _, t := range served {
		if _, ok := c.Credentials[t]; !ok {
			return fmt.Errorf("%s has no credential for tenant %s, whose workspaces the bridge serves (%s): issue one with corral credentials issue --tenant %s --bot (--reviewer with CORRAL_SLACK_REVIEWERS)", name, t, c.servedBy(t), t)
		}
	}
	for _, t := range slices.Sorted(maps.Keys(c.Credentials)) {
		if !c.serves(t) {
			return fmt.Errorf("%s lists tenant %s, which no workspace is of (CORRAL_SLACK_TENANT, CORRAL_SLACK_TEAMS)", name, t)
		}
	}
	return nil
}

// serves reports whether a workspace of the bridge's is tenant's.
func (c *Config) serves(tenant string) bool {
	return c.servedBy(tenant) != ""
}

// servedBy names the setting that makes the bridge serve tenant, or "".
func (c *Config) servedBy(tenant string) string {
	for team, t := range c.Teams {
		if t == tenant {
			return "CORRAL_SLACK_TEAMS: " + team
		}
	}
	if tenant == c.Tenant {
		return "CORRAL_SLACK_TENANT"
	}
	return ""
}

// check reports why cred, who the server says the bridge's connection for
// tenant is signed in as, may not be that connection: it must be a bot's
// of tenant, or a reviewer's (whose reviewer the bridge decides clicks
// as), which it must be when Reviewers names anyone.
func (c *Config) check(tenant string, cred credential.Credential) error {
	switch {
	case cred.Role == credential.RoleOperator:
		return fmt.Errorf("CORRAL_SLACK_CREDENTIALS: the credential for tenant %s (%s) is an operator's, of every tenant: the bridge speaks for each tenant with a credential of that tenant alone (corral credentials issue --tenant %s --bot)", tenant, cred.ID, tenant)
	case cred.Tenant != tenant:
		return fmt.Errorf("CORRAL_SLACK_CREDENTIALS: the credential for tenant %s (%s) is tenant %s's", tenant, cred.ID, cred.Tenant)
	case cred.Role == credential.RoleUser:
		return fmt.Errorf("CORRAL_SLACK_CREDENTIALS: the credential for tenant %s (%s) is user %s's, which speaks for that user alone: the bridge needs a bot's (corral credentials issue --tenant %s --bot)", tenant, cred.ID, cred.User, tenant)
	case len(c.Reviewers) > 0 && cred.Role != credential.RoleReviewer:
		return fmt.Errorf("CORRAL_SLACK_CREDENTIALS: the credential for tenant %s (%s) is a %s's, which may not decide approvals: with CORRAL_SLACK_REVIEWERS, clicks are decided as the reviewer of a reviewer's credential (corral credentials issue --tenant %s --reviewer --user slack)", tenant, cred.ID, cred.Role, tenant)
	}
	return nil
}

// Conn is the bridge's connection for one tenant, signed in with the
// tenant's credential, and that credential as the server says it is
// ([credential.Whoami]).
type Conn struct {
	NC         *nats.Conn
	Credential credential.Credential
}

// Connect signs in to cfg.NATSURL once for each tenant the bridge serves,
// with the tenant's credential, and asks the server who each connection
// is. It fails, having closed what it opened, when a sign-in is refused or
// a credential is not one the bridge may use for the tenant it is listed
// for (see [New]). opts add to every connection's options
// (nats.InProcessServer, say). The caller drains the connections.
func Connect(ctx context.Context, cfg Config, log *slog.Logger, opts ...nats.Option) (map[string]Conn, error) {
	out := make(map[string]Conn)
	closeAll := func() {
		for _, c := range out {
			c.NC.Close()
		}
	}
	for _, t := range cfg.tenants() {
		l := cfg.Credentials[t]
		nc, err := bus.Connect(cfg.NATSURL, "slack-bridge "+t, log, append([]nats.Option{bus.SignIn(l.ID, string(l.Secret))}, opts...)...)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("CORRAL_SLACK_CREDENTIALS: tenant %s: %w", t, err)
		}
		out[t] = Conn{NC: nc}
		cred, err := credential.Whoami(ctx, nc)
		if err == nil {
			err = cfg.check(t, cred)
		} else {
			err = fmt.Errorf("CORRAL_SLACK_CREDENTIALS: tenant %s: %w", t, err)
		}
		if err != nil {
			closeAll()
			return nil, err
		}
		out[t] = Conn{NC: nc, Credential: cred}
	}
	return out, nil
}
