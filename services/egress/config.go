package egress

import (
	"cmp"
	"crypto/ed25519"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"corral.dev/pkg/credential"
	"corral.dev/pkg/envconf"
	"corral.dev/pkg/event"
	"corral.dev/pkg/policy"
	"corral.dev/pkg/seal"
)

// Config is the egress service's configuration, read from the environment
// by [LoadConfig].
type Config struct {
	// Dir holds the service's state on the node (CORRAL_EGRESS_DIR,
	// default /var/lib/corral/egress): its CA (unless given), the
	// control socket, and one directory per sandbox with network, which
	// the sandbox-manager binds into it. It must be on the same host as
	// the sandbox-manager's sandboxes.
	Dir string
	// Policy decides every request (CORRAL_POLICY_FILE, or the built-in
	// default, as the harness's).
	Policy *policy.Policy
	// VaultKey seals the vaults' secrets (CORRAL_EGRESS_VAULT_KEY, 32
	// bytes in base64, or CORRAL_EGRESS_VAULT_KEY_FILE); every egress
	// service of a deployment has the same.
	VaultKey []byte
	// ApprovalKey verifies the reviewers' decisions on held requests
	// (CORRAL_APPROVAL_PUBLIC_KEY, base64). Without it no held request
	// ever passes.
	ApprovalKey ed25519.PublicKey
	// CACert and CAKey are the PEM files of the CA whose certificates the
	// sandboxes trust (CORRAL_EGRESS_CA_CERT_FILE and
	// CORRAL_EGRESS_CA_KEY_FILE); empty: Dir/ca.pem and Dir/ca-key.pem,
	// made on first start.
	CACert, CAKey string
	// SystemRoots is the host's CA bundle, which the sandboxes' bundle
	// starts with (CORRAL_EGRESS_SYSTEM_CA, default
	// /etc/ssl/certs/ca-certificates.crt).
	SystemRoots string
	// AllowPrivate lets requests reach loopback, private and link-local
	// addresses (CORRAL_EGRESS_ALLOW_PRIVATE); off, a name that resolves
	// to one is refused, as the node's own services live there.
	AllowPrivate bool

	// Resolve maps host names to the address to dial instead
	// (CORRAL_EGRESS_TEST_RESOLVE, "host=127.0.0.1:8443,..."). For tests
	// only: it stands local servers in for real hosts.
	Resolve map[string]string
	// UpstreamCA adds CAs, in PEM, the upstreams' certificates may chain
	// to (CORRAL_EGRESS_TEST_UPSTREAM_CA, a PEM file): egress trusts them,
	// and so do the sandboxes, whose tunnelled connections meet those
	// certificates themselves. For tests only.
	UpstreamCA []byte

	// ControlMode is the control socket's mode (CORRAL_EGRESS_CONTROL_MODE,
	// octal, default 0600): 0660 lets a group the sandbox-manager's user
	// is in open sandboxes.
	ControlMode os.FileMode
	// Clients is the account the vault API's requests must come from,
	// through its imports ([credential.AccountClients]); empty takes them
	// from anywhere, for tests on a server without accounts.
	Clients string
}

// LoadConfig reads the configuration from getenv; an error names the
// offending variable.
func LoadConfig(getenv func(string) string) (Config, error) {
	cfg := Config{
		Dir:         cmp.Or(getenv("CORRAL_EGRESS_DIR"), "/var/lib/corral/egress"),
		CACert:      getenv("CORRAL_EGRESS_CA_CERT_FILE"),
		CAKey:       getenv("CORRAL_EGRESS_CA_KEY_FILE"),
		SystemRoots: cmp.Or(getenv("CORRAL_EGRESS_SYSTEM_CA"), "/etc/ssl/certs/ca-certificates.crt"),
		ControlMode: 0o600,
		Clients:     credential.AccountClients,
	}
	var err error
	if (cfg.CACert == "") != (cfg.CAKey == "") {
		return Config{}, fmt.Errorf("CORRAL_EGRESS_CA_CERT_FILE and CORRAL_EGRESS_CA_KEY_FILE go together: set both or neither")
	}
	if cfg.Policy, err = policy.FromEnv(getenv); err != nil {
		return Config{}, err
	}
	if cfg.VaultKey, err = seal.Load(getenv, "CORRAL_EGRESS_VAULT_KEY"); err != nil {
		return Config{}, err
	}
	if cfg.VaultKey == nil {
		return Config{}, fmt.Errorf("CORRAL_EGRESS_VAULT_KEY (or _FILE) is not set: the egress service seals the vaults' secrets with it (32 random bytes in base64: head -c32 /dev/urandom | base64)")
	}
	if k := getenv("CORRAL_APPROVAL_PUBLIC_KEY"); k != "" {
		if cfg.ApprovalKey, err = event.DecodePublicKey(k); err != nil {
			return Config{}, fmt.Errorf("CORRAL_APPROVAL_PUBLIC_KEY: %w", err)
		}
	}
	if cfg.AllowPrivate, err = envconf.Switch(getenv, "CORRAL_EGRESS_ALLOW_PRIVATE", false); err != nil {
		return Config{}, err
	}
	if s := getenv("CORRAL_EGRESS_TEST_RESOLVE"); s != "" {
		cfg.Resolve = make(map[string]string)
		for _, pair := range strings.Split(s, ",") {
			host, addr, ok := strings.Cut(strings.TrimSpace(pair), "=")
			if !ok || host == "" || !strings.Contains(addr, ":") {
				return Config{}, fmt.Errorf("CORRAL_EGRESS_TEST_RESOLVE: want host=ip:port pairs separated by commas, got %q", pair)
			}
			cfg.Resolve[strings.ToLower(host)] = addr
		}
	}
	if f := getenv("CORRAL_EGRESS_TEST_UPSTREAM_CA"); f != "" {
		if cfg.UpstreamCA, err = os.ReadFile(f); err != nil {
			return Config{}, fmt.Errorf("CORRAL_EGRESS_TEST_UPSTREAM_CA: %w", err)
		}
		if !x509.NewCertPool().AppendCertsFromPEM(cfg.UpstreamCA) {
			return Config{}, fmt.Errorf("CORRAL_EGRESS_TEST_UPSTREAM_CA: %s holds no PEM certificate", f)
		}
	}
	if m := getenv("CORRAL_EGRESS_CONTROL_MODE"); m != "" {
		mode, err := strconv.ParseUint(m, 8, 32)
		if err != nil || mode&^0o660 != 0 || mode&0o600 != 0o600 {
			return Config{}, fmt.Errorf("CORRAL_EGRESS_CONTROL_MODE=%s: want 0600 or 0660 (octal)", m)
		}
		cfg.ControlMode = os.FileMode(mode)
	}
	if !filepath.IsAbs(cfg.Dir) {
		return Config{}, fmt.Errorf("CORRAL_EGRESS_DIR=%s: want an absolute path", cfg.Dir)
	}
	return cfg, nil
}
