package credential

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Why [Find] refuses a sign-in; each error it returns wraps one of them or
// [ErrInvalid] (what is kept under the ID is not a valid credential of that
// ID).
var (
	// ErrUnknown: no credential is kept under the ID (never issued, or
	// revoked).
	ErrUnknown = errors.New("unknown credential")
	// ErrWrongSecret: the secret is not the credential's.
	ErrWrongSecret = errors.New("wrong secret")
	// ErrLookup: the credentials bucket could not be read.
	ErrLookup = errors.New("credential lookup failed")
)

// Find returns the credential kept under id in the credentials bucket kv
// if secret signs in as it.
func Find(ctx context.Context, kv jetstream.KeyValue, id, secret string) (Credential, error) {
	if !IsID(id) {
		return Credential{}, fmt.Errorf("%w: %q is not a credential ID", ErrUnknown, id)
	}
	e, err := kv.Get(ctx, id)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return Credential{}, ErrUnknown
	case err != nil:
		return Credential{}, fmt.Errorf("%w: read credential %s: %w", ErrLookup, id, err)
	}
	var cred Credential
	if err := json.Unmarshal(e.Value(), &cred); err != nil {
		return Credential{}, fmt.Errorf("%w: decode credential %s: %w", ErrInvalid, id, err)
	}
	if !cred.Check(secret) {
		return Credential{}, ErrWrongSecret
	}
	// The ID names the user's inbox and its connection: a credential kept
	// under another's ID is not believed.
	if cred.ID != id {
		return Credential{}, fmt.Errorf("%w: credential kept under %s has ID %q", ErrInvalid, id, cred.ID)
	}
	if err := cred.Validate(); err != nil {
		return Credential{}, err
	}
	return cred, nil
}
