package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
	"corral.dev/services/auth"
	sandboxmanager "corral.dev/services/sandbox-manager"
)

// devAuth is what corral dev signs in with, kept in its data directory so
// that a restart keeps every client signed in: each service's password,
// the auth service's signing key, and the developer's credential.
type devAuth struct {
	Passwords  map[string]string `json:"passwords"`
	IssuerSeed string            `json:"issuer_seed"`
	Issuer     string            `json:"issuer"`
	// Client is the developer's credential: an operator, so that one
	// person can run sessions of any tenant, approve and stop them.
	Client credential.Credential `json:"client"`
	Secret string                `json:"secret"`
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
		if a.IssuerSeed, a.Issuer, err = auth.NewIssuer(); err != nil {
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
		b, err := json.MarshalIndent(&a, "", "  ")
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(file, b, 0o600); err != nil {
			return nil, err
		}
	}
	return &a, nil
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

// issue keeps the developer's credential in the credentials bucket, where
// the auth service finds it.
func (a *devAuth) issue(ctx context.Context, js jetstream.JetStream) error {
	kv, err := js.KeyValue(ctx, bus.BucketCredentials)
	if err != nil {
		return err
	}
	b, err := json.Marshal(&a.Client)
	if err != nil {
		return err
	}
	_, err = kv.Put(ctx, a.Client.ID, b)
	return err
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
