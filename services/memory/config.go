package memory

import (
	"crypto/ed25519"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"corral.dev/pkg/credential"
	"corral.dev/pkg/envconf"
	"corral.dev/pkg/event"
)

// Config is the memory service's configuration, read from the environment.
type Config struct {
	// NATSURL is the NATS server (CORRAL_NATS_URL).
	NATSURL string
	// DatabaseURL is the PostgreSQL database (DATABASE_URL); empty keeps
	// files in the embedded JetStream KV store.
	DatabaseURL string
	// MaxFileBytes bounds one file (CORRAL_MEMORY_MAX_FILE_BYTES).
	MaxFileBytes int
	// MaxFiles bounds the files of one tenant (CORRAL_MEMORY_MAX_FILES).
	MaxFiles int
	// MaxTenantBytes bounds the bytes one tenant stores, every kept
	// version of its files included (CORRAL_MEMORY_MAX_TENANT_BYTES).
	MaxTenantBytes int
	// CallTimeout bounds each call (CORRAL_MEMORY_CALL_TIMEOUT, a Go
	// duration; default 30s): one that reaches it ends, and the model is
	// told so.
	CallTimeout time.Duration
	// Concurrency is how many calls run at once (CORRAL_MEMORY_CONCURRENCY).
	Concurrency int
	// ShutdownGrace is how long running calls may finish at shutdown
	// (CORRAL_SHUTDOWN_GRACE, a Go duration).
	ShutdownGrace time.Duration
	// CallKey is the harness's public key for calls
	// (CORRAL_CALL_PUBLIC_KEY): a call runs only if it verifies the
	// harness's signature of it. Nil runs unsigned calls, for tests of the
	// service alone.
	CallKey ed25519.PublicKey
	// Metrics is where the service's metrics are registered (none are
	// served when nil).
	Metrics prometheus.Registerer
	// Clients is the account the API's requests must come from, through
	// its imports ([credential.AccountClients]); empty takes them from
	// anywhere, for tests on a server without accounts.
	Clients string
}

// Defaults of the limits.
const (
	DefaultMaxFileBytes = 256 << 10
	DefaultMaxFiles     = 10_000
	// DefaultMaxTenantBytes is 256 MiB: a thousand files at the largest
	// size, or a few versions each of many smaller ones.
	DefaultMaxTenantBytes = 256 << 20
	DefaultCallTimeout    = 30 * time.Second
)

// LoadConfig reads the configuration from getenv, applies defaults and
// validates it; an error names the offending variable.
func LoadConfig(getenv func(string) string) (Config, error) {
	cfg := Config{
		NATSURL:     envconf.NATSURL(getenv),
		DatabaseURL: getenv("DATABASE_URL"),
		Clients:     credential.AccountClients,
	}
	var err error
	for _, v := range []struct {
		name string
		to   *int
		def  int
	}{
		{"CORRAL_MEMORY_MAX_FILE_BYTES", &cfg.MaxFileBytes, DefaultMaxFileBytes},
		{"CORRAL_MEMORY_MAX_FILES", &cfg.MaxFiles, DefaultMaxFiles},
		{"CORRAL_MEMORY_MAX_TENANT_BYTES", &cfg.MaxTenantBytes, DefaultMaxTenantBytes},
		{"CORRAL_MEMORY_CONCURRENCY", &cfg.Concurrency, 32},
	} {
		if *v.to, err = envconf.Int(getenv, v.name, v.def); err != nil {
			return Config{}, err
		}
	}
	if cfg.CallTimeout, err = envconf.Duration(getenv, "CORRAL_MEMORY_CALL_TIMEOUT", DefaultCallTimeout); err != nil {
		return Config{}, err
	}
	if cfg.ShutdownGrace, err = envconf.Duration(getenv, "CORRAL_SHUTDOWN_GRACE", 10*time.Second); err != nil {
		return Config{}, err
	}
	if cfg.CallKey, err = event.LoadCallKey(getenv); err != nil {
		return Config{}, err
	}
	return cfg, nil
}
