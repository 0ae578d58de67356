// Package seal keeps secrets sealed at rest with a service's key:
// AES-256-GCM, a random nonce before the ciphertext, and where the secret
// is kept (its key in a bucket) as additional data, so that a sealed
// secret copied to another place does not open there.
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"

	"corral.dev/pkg/envconf"
)

// KeySize is the size of a key in bytes.
const KeySize = 32

// ErrNotOpen is returned by [Sealer.Open] for a sealed secret that does
// not open: sealed with another key, kept elsewhere, or altered.
var ErrNotOpen = errors.New("the secret does not open with this service's key")

// Sealer seals and opens secrets with one key. It is safe for concurrent
// use.
type Sealer struct {
	aead cipher.AEAD
}

// New returns a Sealer of key, which must be [KeySize] bytes.
func New(key []byte) (*Sealer, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("a sealing key is %d bytes, not %d", KeySize, len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Sealer{aead: aead}, nil
}

// Seal returns secret sealed to be kept at where.
func (s *Sealer) Seal(secret, where string) []byte {
	nonce := make([]byte, s.aead.NonceSize())
	_, _ = rand.Read(nonce) // never fails (crypto/rand)
	return s.aead.Seal(nonce, nonce, []byte(secret), []byte(where))
}

// Open returns the secret sealed was sealed from, if it was sealed with
// this key to be kept at where; [ErrNotOpen] otherwise.
func (s *Sealer) Open(sealed []byte, where string) (string, error) {
	n := s.aead.NonceSize()
	if len(sealed) < n {
		return "", errors.New("sealed secret too short")
	}
	plain, err := s.aead.Open(nil, sealed[:n], sealed[n:], []byte(where))
	if err != nil {
		return "", ErrNotOpen
	}
	return string(plain), nil
}

// Load reads a key in base64 from the environment variable name, or from
// the file name_FILE names; nil when neither is set. An error names the
// variable.
func Load(getenv func(string) string, name string) ([]byte, error) {
	s, err := envconf.Secret(getenv, name)
	if err != nil || s == "" {
		return nil, err
	}
	k, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(k) != KeySize {
		return nil, fmt.Errorf("%s: want %d bytes in base64", name, KeySize)
	}
	return k, nil
}

// NewKey returns a fresh random key in base64, as [Load] reads it.
func NewKey() string {
	k := make([]byte, KeySize)
	_, _ = rand.Read(k) // never fails (crypto/rand)
	return base64.StdEncoding.EncodeToString(k)
}
