package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
	sandboxmanager "corral.dev/services/sandbox-manager"
)

// devAuth is what corral dev signs in with, kept in its data directory so
// that a restart keeps every client signed in: each service's password,
// the auth service's signing key, the developer's credential, and the
// Slack bridge's.
type devAuth struct {
	Passwords  map[string]string `json:"passwords"`
	IssuerSeed string            `json:"issuer_seed"`
	Issuer     string            `json:"issuer"`
	// Client is the developer's credential: an operator, so that one
	// person can run sessions of any tenant, approve and stop them.
	Client credential.Credential `json:"client"`
	Secret string                `json:"secret"`
	// Slack are the Slack bridge's credentials, by tenant: a bot's of
	// each tenant the bridge serves, or a reviewer's when it maps
	// reviewers.
	Slack map[string]devCredential `json:"slack,omitempty"`
	// Replaced are the IDs of the bridge's credentials that others
	// replaced (of another role, once reviewers were mapped or no longer
	// are): revoked at every start.
	Replaced []string `json:"replaced,omitempty"`
}

// devCredential is a credential corral dev issued and its secret.
type devCredential struct {
	Credential credential.Credential `json:"credential"`
	Secret     string                `json:"secret"`
}

// devAuthFile is where corral dev keeps its devAuth, readable by its user
// alone.
const devAuthFile = "auth.json"

// clientEnvFile is where corral dev writes what a client needs to reach
// it; the CLI reads it when CORRAL_NATS_USER is not set.
const clientEnvFile = "client.env"

// loadDevAuth returns the devAuth kept in data, making what it lacks: an
// operator's credential held by user.
func loadDevAuth(data, user string) (*devAuth, error) {
	file := filepath.Join(data, devAuthFile)
	var a devAuth
	b, err := os.ReadFile(file)
	switch {
	case err == nil:
		if err := json.Unmarshal(b, &a); err != nil {
			return nil, fmt.Errorf("%s: %w (remove it to start afresh)", file, err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	changed := false
	if a.Passwords == nil {
		a.Passwords = make(map[string]string)
	}
	for _, u := range credential.AuthUsers() {
		if a.Passwords[u] == "" {
			a.Passwords[u], changed = rand.Text(), true
		}
	}
	if a.IssuerSeed == "" {
		if a.IssuerSeed, a.Issuer, err = credential.NewIssuer(); err != nil {
			return nil, err
		}
		changed = true
	}
	if a.Client.User != user || a.Client.Role != credential.RoleOperator || a.Secret == "" {
		if a.Client, a.Secret, err = credential.New(credential.AllTenants, user, credential.RoleOperator, "corral dev"); err != nil {
			return nil, err
		}
		changed = true
	}
	if changed {
		if err := a.save(data); err != nil {
			return nil, err
		}
	}
	return &a, nil
}

// save keeps a in data.
func (a *devAuth) save(data string) error {
	b, err := json.MarshalIndent(a, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(data, devAuthFile), b, 0o600)
}

// slackUser is the user of the Slack bridge's credentials corral dev
// issues: the reviewer its clicks are decided as.
const slackUser = "slack"

// slackCredentials returns the Slack bridge's credentials for tenants, of
// role, as CORRAL_SLACK_CREDENTIALS spells them: those kept in data, and
// new ones for the tenants that have none of that role (kept there too).
// [devAuth.issue] puts them in the credentials bucket.
func (a *devAuth) slackCredentials(data string, tenants []string, role credential.Role) (string, error) {
	if a.Slack == nil {
		a.Slack = make(map[string]devCredential)
	}
	changed := false
	var pairs []string
	for _, t := range tenants {
		c, ok := a.Slack[t]
		if !ok || c.Credential.Role != role || c.Credential.Tenant != t {
			cred, secret, err := credential.New(t, slackUser, role, "slack bridge (corral dev)")
			if err != nil {
				return "", fmt.Errorf("slack bridge: %w", err)
			}
			if ok {
				a.Replaced = append(a.Replaced, c.Credential.ID)
			}
			c, changed = devCredential{Credential: cred, Secret: secret}, true
			a.Slack[t] = c
		}
		pairs = append(pairs, t+"="+c.Credential.ID+":"+c.Secret)
	}
	if changed {
		if err := a.save(data); err != nil {
			return "", err
		}
	}
	return strings.Join(pairs, ","), nil
}

// serverConfig writes the server's configuration in data, as
// deploy/nats.conf has it (every service's user with its permissions, the
// admin, the clients' account and the auth callout) with a's passwords and
// issuer, and returns its path.
func (a *devAuth) serverConfig(data string) (string, error) {
	file := filepath.Join(data, "nats.conf")
	return file, credential.WriteConfigFile(file, a.Passwords, a.Issuer)
}

// moveStore moves the streams and buckets of a data directory made before
// the services had an account of their own, from the server's global
// account into theirs.
func moveStore(store string) error {
	old, cur := filepath.Join(store, "jetstream", server.DEFAULT_GLOBAL_ACCOUNT), filepath.Join(store, "jetstream", credential.AccountServices)
	if _, err := os.Stat(old); err != nil {
		return nil
	}
	if _, err := os.Stat(cur); err == nil {
		return nil
	}
	return os.Rename(old, cur)
}

// issue keeps the developer's credential and the Slack bridge's in the
// credentials bucket, where the auth service finds them, and revokes the
// bridge's replaced ones.
func (a *devAuth) issue(ctx context.Context, js jetstream.JetStream) error {
	kv, err := js.KeyValue(ctx, bus.BucketCredentials)
	if err != nil {
		return err
	}
	for _, id := range a.Replaced {
		if err := kv.Delete(ctx, id); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return err
		}
	}
	creds := []credential.Credential{a.Client}
	for _, t := range slices.Sorted(maps.Keys(a.Slack)) {
		creds = append(creds, a.Slack[t].Credential)
	}
	for _, c := range creds {
		b, err := json.Marshal(&c)
		if err != nil {
			return err
		}
		if _, err := kv.Put(ctx, c.ID, b); err != nil {
			return err
		}
	}
	return nil
}

// clientEnv is what a client needs to reach corral dev at url: the lines
// of client.env, which the CLI reads and a shell can source.
func (a *devAuth) clientEnv(url string) string {
	return strings.Join([]string{
		"CORRAL_NATS_URL=" + url,
		"CORRAL_NATS_USER=" + a.Client.ID,
		"CORRAL_NATS_PASSWORD=" + a.Secret,
		"CORRAL_USER=" + a.Client.User,
	}, "\n") + "\n"
}

// devClientEnv returns the settings corral dev wrote for clients in
// data's client.env, or nil when there is none.
func devClientEnv(data string) map[string]string {
	b, err := os.ReadFile(filepath.Join(data, clientEnvFile))
	if err != nil {
		return nil
	}
	out := make(map[string]string)
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			out[k] = v
		}
	}
	return out
}

// withDevCredentials returns getenv, completed with what corral dev wrote
// in its default data directory's client.env when no credential is set and
// no other server is named: a client on the developer's machine signs in
// to corral dev with no flag.
func withDevCredentials(getenv func(string) string) func(string) string {
	if getenv("CORRAL_NATS_USER") != "" {
		return getenv
	}
	data, err := sandboxmanager.DefaultDataDir()
	if err != nil {
		return getenv
	}
	dev := devClientEnv(data)
	if dev == nil || (getenv("CORRAL_NATS_URL") != "" && getenv("CORRAL_NATS_URL") != dev["CORRAL_NATS_URL"]) {
		return getenv
	}
	return func(k string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return dev[k]
	}
}
