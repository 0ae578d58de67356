package gateway

import (
	"fmt"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"corral.dev/pkg/credential"
	"corral.dev/pkg/envconf"
	"corral.dev/pkg/policy"
)

// Config is the gateway's configuration, read from the environment by
// [LoadConfig].
type Config struct {
	// NATSURL is the NATS server (CORRAL_NATS_URL): the gateway signs in
	// there as itself for the index, and as each API key's client for
	// what the key asks.
	NATSURL string
	// Listen is where the HTTP API is served (CORRAL_GATEWAY_LISTEN,
	// HOST:PORT); empty serves none, and the gateway only keeps the
	// session index.
	Listen string
	// Prices price each model response for the index's cost: the price
	// table of the policy file CORRAL_POLICY_FILE (default the built-in
	// one), as the harness prices budgets.
	Prices *policy.Policy
	// Concurrency is how many sessions' events are indexed at once.
	Concurrency int
	// KeyIdle is how long a client connection made for an API key is
	// kept unused before it is closed (CORRAL_GATEWAY_KEY_IDLE, a Go
	// duration; default 5m).
	KeyIdle time.Duration
	// MaxKeys bounds the client connections kept at once
	// (CORRAL_GATEWAY_MAX_KEYS, default 1024): past it, a new key's
	// request waits for none and is refused with 529.
	MaxKeys int
	// Heartbeat is how often an idle event stream is sent a ping.
	Heartbeat time.Duration
	// Metrics is where the gateway's metrics are registered (none are
	// served when nil).
	Metrics prometheus.Registerer
	// MaxRecords bounds the agents and sessions the API keeps of one
	// tenant (CORRAL_GATEWAY_MAX_RECORDS, default 100000): past it, a
	// create is refused, and other tenants keep their room.
	MaxRecords int
	// MaxBehind is how many of a session's events an event stream's
	// reader may fall behind the log before the stream is ended, for it
	// to go on from its Last-Event-ID (default 10000).
	MaxBehind int
	// Webhooks is how the tenants' webhooks are delivered.
	Webhooks WebhookConfig
	// TracesEndpoint is where the sessions' spans are sent over OTLP/HTTP,
	// as the standard OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
	// OTEL_EXPORTER_OTLP_ENDPOINT say; empty exports none.
	TracesEndpoint string
}

// LoadConfig reads the configuration from getenv; an error names the
// offending variable.
func LoadConfig(getenv func(string) string) (Config, error) {
	cfg := Config{
		NATSURL:     envconf.NATSURL(getenv),
		Listen:      getenv("CORRAL_GATEWAY_LISTEN"),
		Concurrency: 16,
		Heartbeat:   15 * time.Second,
	}
	if cfg.Listen != "" {
		if _, _, err := net.SplitHostPort(cfg.Listen); err != nil {
			return Config{}, fmt.Errorf("CORRAL_GATEWAY_LISTEN=%q: want HOST:PORT", cfg.Listen)
		}
	}
	var err error
	if cfg.KeyIdle, err = envconf.Duration(getenv, "CORRAL_GATEWAY_KEY_IDLE", 5*time.Minute); err != nil {
		return Config{}, err
	}
	if cfg.MaxKeys, err = envconf.Int(getenv, "CORRAL_GATEWAY_MAX_KEYS", 1024); err != nil {
		return Config{}, err
	}
	cfg.Prices = policy.Default()
	if file := getenv("CORRAL_POLICY_FILE"); file != "" {
		if cfg.Prices, err = policy.Load(file); err != nil {
			return Config{}, fmt.Errorf("CORRAL_POLICY_FILE: %w", err)
		}
	}
	if cfg.MaxRecords, err = envconf.Int(getenv, "CORRAL_GATEWAY_MAX_RECORDS", defaultMaxRecords); err != nil {
		return Config{}, err
	}
	if cfg.Webhooks, err = loadWebhookConfig(getenv, credential.AccountClients); err != nil {
		return Config{}, err
	}
	if cfg.TracesEndpoint, err = tracesEndpoint(getenv); err != nil {
		return Config{}, err
	}
	return cfg, nil
}
