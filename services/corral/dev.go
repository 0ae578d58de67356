package main

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
	"corral.dev/pkg/event"
	"corral.dev/pkg/logger"
	"corral.dev/pkg/metrics"
	"corral.dev/pkg/process"
	"corral.dev/pkg/seal"
	"corral.dev/pkg/version"
	"corral.dev/services/approval"
	"corral.dev/services/auth"
	"corral.dev/services/egress"
	"corral.dev/services/gateway"
	"corral.dev/services/harness"
	"corral.dev/services/memory"
	sandboxmanager "corral.dev/services/sandbox-manager"
	slackbridge "corral.dev/services/slack-bridge"
)

func (e *env) devCmd() *cobra.Command {
	var data, listen, level, dbURL, approvals, metricsAddr, api string
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run the whole platform in one process: embedded NATS, harness, sandbox-manager, memory and approval",
		Long: `Runs an embedded NATS server with JetStream (stored under --data) and every
Corral service in this process. State is kept in --data, so a restart resumes
unfinished sessions. Memories and skills are kept in PostgreSQL when
--database-url (or DATABASE_URL) is given, and otherwise in the embedded NATS
server. Model providers are configured from the environment: OPENAI_API_KEY,
OPENAI_BASE_URL, ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL, CORRAL_MODEL.

Reviewers approve held calls on the page at --approvals. Unless
CORRAL_REVIEWER_TOKENS names reviewers, one reviewer ($USER) is made with a
token kept in --data and printed at start. The key that signs decisions is
made once and kept in --data too.

The gateway keeps the session index (corral sessions), and with --api serves
the Managed Agents API over HTTP there; its keys are clients' credentials,
ID:SECRET (corral credentials issue).

With CORRAL_SLACK_SIGNING_SECRET and CORRAL_SLACK_BOT_TOKEN set, the Slack
bridge runs too, on CORRAL_SLACK_LISTEN (see the README's Slack section). It
signs in as a client, with a credential of each tenant it serves: unless
CORRAL_SLACK_CREDENTIALS gives them, a bot's made here and kept in --data (a
reviewer's, "slack", whose clicks decide, when CORRAL_SLACK_REVIEWERS maps
reviewers).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if data == "" {
				d, err := sandboxmanager.DefaultDataDir()
				if err != nil {
					return err
				}
				data = d
			}
			return e.dev(cmd.Context(), devOpts{data: data, listen: listen, level: level, dbURL: dbURL, approvals: approvals, metrics: metricsAddr, api: api})
		},
	}
	cmd.Flags().StringVar(&data, "data", "", "directory for Corral's state (default $XDG_STATE_HOME/corral or ~/.local/state/corral)")
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:4222", "HOST:PORT for the embedded NATS server")
	cmd.Flags().StringVar(&dbURL, "database-url", e.getenv("DATABASE_URL"), "PostgreSQL URL for memories and skills (DATABASE_URL; default: kept in the embedded NATS server)")
	cmd.Flags().StringVar(&approvals, "approvals", cmp.Or(e.getenv("CORRAL_APPROVAL_LISTEN"), "127.0.0.1:7480"), "HOST:PORT for the reviewers' web page (CORRAL_APPROVAL_LISTEN); empty serves none")
	cmd.Flags().StringVar(&metricsAddr, "metrics", cmp.Or(e.getenv("CORRAL_METRICS_LISTEN"), "127.0.0.1:7481"), "HOST:PORT for every service's Prometheus metrics (/metrics) and health (/healthz) (CORRAL_METRICS_LISTEN); empty serves none")
	cmd.Flags().StringVar(&api, "api", e.getenv("CORRAL_GATEWAY_LISTEN"), "HOST:PORT for the Managed Agents API over HTTP, such as 127.0.0.1:7483 (CORRAL_GATEWAY_LISTEN); empty serves none")
	cmd.Flags().StringVar(&level, "log-level", cmp.Or(e.getenv("CORRAL_LOG_LEVEL"), "warn"), "debug, info, warn or error (each service's start, and each sandbox's, is logged at info)")
	return cmd
}

// components are the services corral dev runs as they run deployed, by
// their NATS users: each configured from its Env's environment, and
// started as its binary starts it.
var components = map[string]process.Component{
	credential.UserAuth:     process.Of(auth.LoadConfig, auth.Start),
	credential.UserMemory:   process.Of(memory.LoadConfig, memory.Start),
	credential.UserSandbox:  process.Of(sandboxmanager.LoadConfig, sandboxmanager.Start),
	credential.UserEgress:   process.Of(egress.LoadConfig, egress.Start),
	credential.UserApproval: process.Of(approval.LoadConfig, approval.Start),
	credential.UserHarness:  process.Of(harness.LoadConfig, harness.Start),
	credential.UserGateway:  process.Of(gateway.LoadConfig, gateway.Start),
}

// devOpts are corral dev's flags.
type devOpts struct {
	data, listen, level, dbURL, approvals, metrics, api string
}

func (e *env) dev(ctx context.Context, o devOpts) error {
	data, listen, level, dbURL, approvals := o.data, o.listen, o.level, o.dbURL, o.approvals
	log := logger.New(e.stderr, level, e.getenv("CORRAL_LOG_FORMAT"))
	host, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("--listen %q: want HOST:PORT", listen)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return fmt.Errorf("--listen %q: bad port", listen)
	}
	if err := os.MkdirAll(data, 0o700); err != nil {
		return err
	}
	// One corral dev at a time over a data directory: two would run
	// over one store.
	lock, err := lockData(data)
	if err != nil {
		return err
	}
	defer lock.Close()
	// The server signs in every service and the admin by password, and
	// every client through the auth service, as deployed.
	creds, err := loadDevAuth(data, cmp.Or(e.getenv("CORRAL_USER"), e.getenv("USER"), "dev"))
	if err != nil {
		return err
	}
	// Written again once clients can sign in.
	if err := os.Remove(filepath.Join(data, clientEnvFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	srv, err := startDevServer(data, listen, host, port, creds)
	if err != nil {
		return err
	}
	defer func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	}()

	keys, err := devKeys(data, e.getenv)
	if err != nil {
		return err
	}
	getenv := func(k string) string {
		switch k {
		case "CORRAL_DATA_DIR":
			return data
		case "DATABASE_URL":
			return dbURL
		case "CORRAL_APPROVAL_LISTEN":
			return approvals
		case "CORRAL_GATEWAY_LISTEN":
			return o.api
		case "CORRAL_NATS_URL":
			// The gateway signs API keys in over the network: a refused
			// in-process sign-in is told only after a time-out.
			return "nats://" + listen
		case "CORRAL_EGRESS_DIR":
			return cmp.Or(e.getenv(k), filepath.Join(data, "egress"))
		case "CORRAL_EGRESS_SOCKET":
			// The sandbox-manager opens its sandboxes' way out there.
			return filepath.Join(cmp.Or(e.getenv("CORRAL_EGRESS_DIR"), filepath.Join(data, "egress")), "control.sock")
		}
		if v, ok := keys[k]; ok {
			return v
		}
		if k == "CORRAL_AUTH_ISSUER_SEED" {
			return creds.IssuerSeed
		}
		return e.getenv(k)
	}
	authcfg, err := auth.LoadConfig(getenv)
	if err != nil {
		return err
	}
	// The services run as they run deployed, each signed in as itself, in
	// one process with the server: one registry for all, and their
	// connections drained once every service has stopped, before the
	// server stops.
	env := process.NewEnv(getenv, log, metrics.NewRegistry(), func(name string) (*nats.Conn, error) {
		return bus.Connect("", name, log, nats.InProcessServer(srv), bus.SignIn(name, creds.Passwords[name]))
	})
	env.ClientOptions = []nats.Option{nats.InProcessServer(srv)}
	defer func() {
		if err := env.Close(); err != nil {
			log.Warn("drain", "err", err)
		}
	}()
	// The administrator sets up the streams and buckets, which the
	// services' users may not create.
	_, admin, err := env.Connect(credential.UserAdmin)
	if err != nil {
		return err
	}
	bounds, err := bus.StoreBytesFromEnv(getenv)
	if err != nil {
		return err
	}
	if err := bus.Setup(ctx, admin, bounds...); err != nil {
		return err
	}
	if err := gateway.Setup(ctx, admin); err != nil {
		return err
	}
	// The Slack bridge runs when a Slack app is configured, signed in
	// with credentials issued here unless the environment gives them.
	var bcfg *slackbridge.Config
	if getenv("CORRAL_SLACK_SIGNING_SECRET") != "" && getenv("CORRAL_SLACK_BOT_TOKEN") != "" {
		c, err := slackConfig(data, creds, getenv)
		if err != nil {
			return err
		}
		bcfg = &c
	}
	if err := creds.issue(ctx, admin); err != nil {
		return err
	}
	if dbURL == "" {
		// The embedded store's bucket, which the memory service may not
		// create itself.
		if _, err := memory.NewKVStore(ctx, admin); err != nil {
			return err
		}
	}
	if bcfg != nil {
		// Its bucket, which the bridge's credentials may not create.
		if _, err := slackbridge.Setup(ctx, admin); err != nil {
			return err
		}
	}
	url := "nats://" + listen
	// Say what to do about a taken port before anything starts.
	if err := checkListeners(o, bcfg); err != nil {
		return err
	}
	authsvc, err := auth.Start(ctx, authcfg, env)
	if err != nil {
		return err
	}
	// The harness, which asks the others for work, stops before them, and
	// the sandbox-manager, whose calls in flight record their results,
	// before the memory service and egress, which its sandboxes reach
	// out through.
	order := []string{credential.UserMemory, credential.UserEgress, credential.UserSandbox, credential.UserApproval, credential.UserHarness, credential.UserGateway}
	runners := make([]process.Runner, len(order))
	for i, name := range order {
		if runners[i], err = components[name](ctx, env); err != nil {
			return err
		}
	}

	// Started in the order they rely on each other, and stopped in
	// reverse: the auth service, which clients sign in through, last.
	services := newStack()
	defer services.stop()
	services.start(ctx, "auth", authsvc.Run)
	// Clients learn how to sign in once they can.
	select {
	case <-authsvc.Ready():
	case <-ctx.Done():
		return services.stop()
	case <-services.failure():
		return services.stop()
	}
	// Written whole or not at all: a client may read it at any moment.
	if err := writeFileAtomic(filepath.Join(data, clientEnvFile), []byte(creds.clientEnv(url)), 0o600); err != nil {
		return errors.Join(err, services.stop())
	}
	var sb *slackbridge.Service
	if bcfg != nil {
		// A client, signed in through the auth service like any other,
		// in this process.
		if sb, err = slackbridge.Start(ctx, *bcfg, env); err != nil {
			return errors.Join(err, services.stop())
		}
	}
	for i, name := range order {
		services.start(ctx, name, runners[i].Run)
	}
	if sb != nil {
		services.start(ctx, "slack-bridge", sb.Run)
	}
	if o.metrics != "" {
		services.start(ctx, "metrics", func(ctx context.Context) error {
			return metrics.Serve(ctx, o.metrics, env.Metrics, env.Healthy, log)
		})
	}
	e.devBanner(o, url, creds, keys["CORRAL_REVIEWER_TOKENS"], bcfg, modelNote(getenv))
	err = services.wait(ctx)
	log.Info("corral dev stopped")
	return err
}

// startDevServer starts corral dev's NATS server on listen (host:port),
// storing in data/nats, signing in the services, the administrator and
// clients as creds says. It says what to do when the address is taken.
func startDevServer(data, listen, host string, port int, creds *devAuth) (*server.Server, error) {
	conf, err := creds.serverConfig(data)
	if err != nil {
		return nil, err
	}
	if err := moveStore(filepath.Join(data, "nats")); err != nil {
		return nil, err
	}
	srv, err := bus.StartServer(bus.ServerConfig{Host: host, Port: port, StoreDir: filepath.Join(data, "nats"), ConfigFile: conf})
	if errors.Is(err, bus.ErrAddrInUse) {
		alt := net.JoinHostPort(host, strconv.Itoa(port+1))
		return nil, fmt.Errorf(`%s is already in use, probably by another NATS server.
Stop that server, or run Corral on another port and point the clients at it:
    corral dev --listen %s
    export CORRAL_NATS_URL=nats://%s`, listen, alt, alt)
	}
	return srv, err
}

// devBanner tells the person who started corral dev how to use it: where
// the server and the pages are, and how clients and reviewers sign in
// (reviewer is the one reviewer corral dev made, "name=token", if any).
func (e *env) devBanner(o devOpts, url string, creds *devAuth, reviewer string, bcfg *slackbridge.Config, models string) {
	where := "the embedded store"
	if o.dbURL != "" {
		where = "PostgreSQL"
	}
	fmt.Fprintf(e.stderr, "Corral %s is running: NATS on %s, state in %s, memories in %s. Ctrl-C stops it.\n", version.String(), url, o.data, where)
	fmt.Fprintln(e.stderr, models)
	fmt.Fprintf(e.stderr, "Clients sign in as operator %q, of every tenant (kept in %s; the corral CLI finds it there):\n",
		creds.Client.User, filepath.Join(o.data, clientEnvFile))
	fmt.Fprintf(e.stderr, "    export CORRAL_NATS_URL=%s CORRAL_NATS_USER=%s CORRAL_NATS_PASSWORD=%s\n", url, creds.Client.ID, creds.Secret)
	fmt.Fprintf(e.stderr, "    nats --server %s --user %s --password %s --inbox-prefix %s ...\n", url, creds.Client.ID, creds.Secret, creds.Client.Inbox())
	fmt.Fprintln(e.stderr, "More credentials: corral credentials issue --tenant T [--user U | --bot | --reviewer]")
	if o.approvals != "" {
		fmt.Fprintf(e.stderr, "Reviewers approve held calls at http://%s", o.approvals)
		if reviewer != "" {
			name, token, _ := strings.Cut(reviewer, "=")
			fmt.Fprintf(e.stderr, " (%s signs in with token %s)", name, token)
		}
		fmt.Fprintln(e.stderr)
	}
	if bcfg != nil {
		fmt.Fprintf(e.stderr, "Slack's requests go to http://%s: events %s, commands %s, interactivity %s\n",
			bcfg.Listen, slackbridge.PathEvents, slackbridge.PathCommands, slackbridge.PathInteractive)
	}
	if o.api != "" {
		fmt.Fprintf(e.stderr, "The Managed Agents API is at http://%s (an API key is a credential's ID:SECRET)\n", o.api)
	}
	if o.metrics != "" {
		fmt.Fprintf(e.stderr, "Metrics at http://%s/metrics, health at http://%s/healthz\n", o.metrics, o.metrics)
	}
	try := `corral run "list the files in /workspace"`
	if d, err := sandboxmanager.DefaultDataDir(); err != nil || filepath.Clean(d) != filepath.Clean(o.data) {
		// The client finds corral dev's credentials in the default
		// data directory only: elsewhere, it needs the line above.
		try = fmt.Sprintf("CORRAL_NATS_URL=%s CORRAL_NATS_USER=%s CORRAL_NATS_PASSWORD=%s %s", url, creds.Client.ID, creds.Secret, try)
	}
	fmt.Fprintln(e.stderr, "Try: "+try)
}

// modelNote says which model a session that names none runs, and which
// providers the harness can reach, as the harness configured from getenv
// does: the default depends on the keys corral dev was started with.
func modelNote(getenv func(string) string) string {
	cfg, err := harness.LoadConfig(getenv)
	if err != nil {
		return "Models: " + err.Error()
	}
	var on []string
	p := cfg.Providers()
	if p.Anthropic != nil {
		on = append(on, "anthropic")
	}
	if p.OpenAI != nil {
		on = append(on, "openai")
	}
	if len(on) == 0 {
		return "No model provider is configured: sessions fail until ANTHROPIC_API_KEY or OPENAI_API_KEY (or OPENAI_BASE_URL) is set in corral dev's environment and corral dev is restarted."
	}
	return fmt.Sprintf("Models: %s by default (CORRAL_MODEL sets it; a session may name another); providers: %s.", cfg.DefaultModel, strings.Join(on, ", "))
}

// checkListeners returns an error saying what to do when an address
// corral dev would serve on is taken.
func checkListeners(o devOpts, bcfg *slackbridge.Config) error {
	listeners := []struct{ addr, what, flag string }{{o.approvals, "the reviewers' page", "--approvals"}, {o.metrics, "the metrics", "--metrics"}, {o.api, "the API", "--api"}}
	if bcfg != nil {
		listeners = append(listeners, struct{ addr, what, flag string }{bcfg.Listen, "the Slack bridge", "CORRAL_SLACK_LISTEN="})
	}
	for _, l := range listeners {
		if l.addr == "" {
			continue
		}
		ln, err := net.Listen("tcp", l.addr)
		if err != nil {
			return fmt.Errorf("%s cannot listen on %s (%v); pick another with %s HOST:PORT", l.what, l.addr, err, l.flag)
		}
		ln.Close()
	}
	return nil
}

// devKeys returns the signing settings `corral dev` makes unless the
// environment gives them: the approval service's key and its public half
// for the harness, the harness's key for calls and its public half for
// the tool services, the keys that seal the vaults' and the webhooks'
// secrets, and one reviewer's token. They are kept in data, so that a
// restart keeps decisions and queued calls verifiable, the secrets
// readable and the reviewer signed in.
func devKeys(data string, getenv func(string) string) (map[string]string, error) {
	out := make(map[string]string)
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, err
	}
	// The approval service's key for decisions, and the harness's for
	// calls.
	for _, pair := range [][2]string{
		{"CORRAL_APPROVAL_SIGNING_KEY", "CORRAL_APPROVAL_PUBLIC_KEY"},
		{"CORRAL_CALL_SIGNING_KEY", "CORRAL_CALL_PUBLIC_KEY"},
	} {
		name, public := pair[0], pair[1]
		key, err := event.LoadPrivateKey(getenv, name)
		if err != nil {
			return nil, err
		}
		if key == nil {
			file := strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(name, "CORRAL_"), "_SIGNING_KEY")) + ".key"
			k, err := keepSecret(filepath.Join(data, file), func() string {
				_, priv, _ := ed25519.GenerateKey(rand.Reader)
				return event.EncodeKey(priv)
			})
			if err != nil {
				return nil, err
			}
			if key, err = event.DecodePrivateKey(k); err != nil {
				return nil, fmt.Errorf("%s: %w", filepath.Join(data, file), err)
			}
			out[name] = k
		}
		if getenv(public) == "" {
			out[public] = event.EncodeKey(key.Public().(ed25519.PublicKey))
		}
	}
	// The keys that seal secrets at rest: egress's for the vaults', the
	// gateway's for the webhooks'.
	for name, file := range map[string]string{
		"CORRAL_EGRESS_VAULT_KEY":    "egress-vault.key",
		"CORRAL_GATEWAY_WEBHOOK_KEY": "gateway-webhook.key",
	} {
		if getenv(name) != "" || getenv(name+"_FILE") != "" {
			continue
		}
		k, err := keepSecret(filepath.Join(data, file), seal.NewKey)
		if err != nil {
			return nil, err
		}
		out[name] = k
	}
	if getenv("CORRAL_REVIEWER_TOKENS") == "" && getenv("CORRAL_REVIEWER_HEADER") == "" {
		token, err := keepSecret(filepath.Join(data, "reviewer.token"), func() string { return rand.Text() })
		if err != nil {
			return nil, err
		}
		out["CORRAL_REVIEWER_TOKENS"] = cmp.Or(getenv("USER"), "reviewer") + "=" + token
	}
	return out, nil
}

// keepSecret returns the secret kept in file, making it with mk first if
// there is none.
func keepSecret(file string, mk func() string) (string, error) {
	b, err := os.ReadFile(file)
	if err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	s := mk()
	if err := os.WriteFile(file, []byte(s+"\n"), 0o600); err != nil {
		return "", err
	}
	return s, nil
}

// slackConfig returns the Slack bridge's configuration from getenv. Unless
// CORRAL_SLACK_CREDENTIALS (or its file) gives the bridge's credentials,
// they are those kept in creds (made there the first time): a bot's of
// each tenant the bridge serves, or a reviewer's with CORRAL_SLACK_REVIEWERS.
func slackConfig(data string, creds *devAuth, getenv func(string) string) (slackbridge.Config, error) {
	if getenv("CORRAL_SLACK_CREDENTIALS") != "" || getenv("CORRAL_SLACK_CREDENTIALS_FILE") != "" {
		return slackbridge.LoadConfig(getenv)
	}
	tenants, err := slackbridge.Tenants(getenv)
	if err != nil {
		return slackbridge.Config{}, err
	}
	role := credential.RoleBot
	if getenv("CORRAL_SLACK_REVIEWERS") != "" {
		role = credential.RoleReviewer
	}
	logins, err := creds.slackCredentials(data, tenants, role)
	if err != nil {
		return slackbridge.Config{}, err
	}
	return slackbridge.LoadConfig(func(k string) string {
		if k == "CORRAL_SLACK_CREDENTIALS" {
			return logins
		}
		return getenv(k)
	})
}
