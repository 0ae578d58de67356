package credential

import (
	"fmt"

	"github.com/nats-io/nkeys"
)

// NewIssuer makes a fresh key pair for the auth service to sign its
// answers to the NATS server's auth callout with: an account key pair,
// which is what the server's auth_callout issuer must be. Seed is for the
// auth service alone (CORRAL_AUTH_ISSUER_SEED), public for the server
// ([NATSConfig]'s issuer, CORRAL_AUTH_ISSUER). Corral dev and corral
// credentials issuer make one.
func NewIssuer() (seed, public string, err error) {
	kp, err := nkeys.CreateAccount()
	if err != nil {
		return "", "", fmt.Errorf("make issuer key: %w", err)
	}
	s, err := kp.Seed()
	if err != nil {
		return "", "", err
	}
	public, err = kp.PublicKey()
	if err != nil {
		return "", "", err
	}
	return string(s), public, nil
}
