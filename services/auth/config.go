package auth

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nkeys"
	"github.com/prometheus/client_golang/prometheus"

	"corral.dev/pkg/credential"
	"corral.dev/pkg/envconf"
)

// Config is the auth service's configuration, read from the environment
// by [LoadConfig].
type Config struct {
	// NATSURL is the NATS server to connect to (CORRAL_NATS_URL).
	NATSURL string
	// Issuer signs every answer and every user it lets in
	// (CORRAL_AUTH_ISSUER_SEED). The NATS server's auth_callout names its
	// public key, and believes no answer signed by another.
	Issuer *Issuer
	// TTL is how long a client stays signed in before the server asks
	// again (CORRAL_AUTH_TTL, a Go duration; default 10m). A revoked
	// credential's connections are cut at most this long after.
	TTL time.Duration
	// Account is the server account clients are placed in
	// (CORRAL_AUTH_ACCOUNT; default CLIENTS, the account deploy/nats.conf
	// keeps them in, apart from the services').
	Account string
	// Workers is how many questions are answered at once.
	Workers int
	// MaxConsumers bounds the consumers one credential may have on each
	// stream it may read (CORRAL_AUTH_MAX_CONSUMERS; default 256: a bot
	// such as the Slack bridge follows each open thread's session with
	// one).
	MaxConsumers int
	// ConsumerIdle is how long a client's consumer may go unused before
	// the server deletes it (CORRAL_AUTH_CONSUMER_IDLE, a Go duration;
	// default 10m): a client asking for longer, or forever, gets this.
	ConsumerIdle time.Duration
	// Metrics is where the service's metrics are registered (none are
	// when nil).
	Metrics prometheus.Registerer
}

// Defaults of [Config].
const (
	DefaultTTL     = 10 * time.Minute
	DefaultAccount = credential.AccountClients
	// DefaultMaxConsumers and DefaultConsumerIdle bound clients'
	// consumers.
	DefaultMaxConsumers = 256
	DefaultConsumerIdle = 10 * time.Minute
	// MinTTL is the shortest TTL: a user whose sign-in expires sooner
	// would spend its life signing in again.
	MinTTL = time.Second
)

// LoadConfig reads the configuration from getenv; an error names the
// offending variable.
func LoadConfig(getenv func(string) string) (Config, error) {
	cfg := Config{
		NATSURL: envconf.NATSURL(getenv),
		Account: cmp.Or(getenv("CORRAL_AUTH_ACCOUNT"), DefaultAccount),
		Workers: 16,
	}
	seed := getenv("CORRAL_AUTH_ISSUER_SEED")
	if seed == "" {
		return Config{}, fmt.Errorf("CORRAL_AUTH_ISSUER_SEED is not set: the auth service signs its answers with it (corral credentials issuer makes one)")
	}
	var err error
	if cfg.Issuer, err = ParseIssuer(seed); err != nil {
		return Config{}, fmt.Errorf("CORRAL_AUTH_ISSUER_SEED: %w", err)
	}
	if cfg.MaxConsumers, err = envconf.Int(getenv, "CORRAL_AUTH_MAX_CONSUMERS", DefaultMaxConsumers); err != nil {
		return Config{}, err
	}
	if cfg.ConsumerIdle, err = envconf.DurationAtLeast(getenv, "CORRAL_AUTH_CONSUMER_IDLE", DefaultConsumerIdle, time.Second); err != nil {
		return Config{}, err
	}
	if cfg.TTL, err = envconf.DurationAtLeast(getenv, "CORRAL_AUTH_TTL", DefaultTTL, MinTTL); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// Issuer is the auth service's signing key: an account key pair. It
// prints, and logs, as its public key alone.
type Issuer struct {
	kp  nkeys.KeyPair
	pub string
}

// ParseIssuer returns the issuer whose seed is seed ("SA...", as
// [credential.NewIssuer] makes): an error for anything but an account's
// seed.
func ParseIssuer(seed string) (*Issuer, error) {
	kp, err := nkeys.FromSeed([]byte(seed))
	if err != nil {
		// The error never holds the seed.
		return nil, fmt.Errorf("not an nkeys seed: %w", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, err
	}
	if !nkeys.IsValidPublicAccountKey(pub) {
		return nil, fmt.Errorf("not an account seed (SA...): its public key is %s, want A...", pub)
	}
	return &Issuer{kp: kp, pub: pub}, nil
}

// Public returns the issuer's public key, which the NATS server's
// auth_callout names.
func (i *Issuer) Public() string { return i.pub }

// String returns the public key: never the seed.
func (i *Issuer) String() string { return i.pub }

// LogValue logs the public key: never the seed.
func (i *Issuer) LogValue() slog.Value { return slog.StringValue(i.pub) }
