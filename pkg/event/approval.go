package event

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"corral.dev/pkg/envconf"
)

// ApprovalRequested records that a call waits for a reviewer: the policy
// rule that holds it, and the exact call. The harness records it in the
// session's log; the approval service shows it to reviewers.
// Schema: schemas/approval/v1/requested.json.
type ApprovalRequested struct {
	Header
	Call  uuid.UUID       `json:"call"`
	Turn  int             `json:"turn"`
	User  string          `json:"user"`
	Tool  string          `json:"tool"`
	Input json.RawMessage `json:"input"`
	// ArgsHash is [ArgsHash] of the call: what a decision must carry.
	ArgsHash string `json:"args_hash"`
	Rule     string `json:"rule"`
	Reason   string `json:"reason"`
	// Preview, when set, is what the call would change as it stood when
	// the harness asked: a unified diff of the file an Edit changes, made
	// by the service that would run it (or a line saying why there is
	// none). It is informational only: ArgsHash, which a decision signs,
	// covers the tool and input, never the preview.
	Preview string `json:"preview,omitempty"`
}

// ApprovalDecided records a reviewer's decision on a call. Only the approval
// service may publish it, and it signs it: the harness acts on a decision
// only when the signature verifies with the approval service's public key
// and the decision names this tenant, session, call and arguments, so a
// forged, replayed or altered decision does nothing.
// Schema: schemas/approval/v1/decided.json.
type ApprovalDecided struct {
	Header
	Call     uuid.UUID `json:"call"`
	ArgsHash string    `json:"args_hash"`
	Approved bool      `json:"approved"`
	// Reviewer is who decided; "corral" when an approval expired.
	Reviewer string `json:"reviewer"`
	Reason   string `json:"reason,omitempty"`
	// Signature is the Ed25519 signature of [ApprovalDecided.SignedBytes].
	Signature []byte `json:"signature"`
}

// ArgsHash returns the hex SHA-256 of a call's tool name and input, which
// binds a decision to the exact call it was asked about. The input is
// hashed in the form the session log keeps it (compact, with <, > and &
// escaped, as encoding/json writes a raw message), so that the harness,
// which has the model's bytes, and the approval service, which reads the
// log's, hash the same thing; invalid JSON is hashed as it is.
func ArgsHash(tool string, input json.RawMessage) string {
	h := sha256.New()
	h.Write([]byte(tool))
	h.Write([]byte{0})
	h.Write(canonical(input))
	return hex.EncodeToString(h.Sum(nil))
}

// canonical returns input as a JSON encoder writes it.
func canonical(input json.RawMessage) []byte {
	if len(input) == 0 {
		return []byte("null")
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, input); err != nil {
		return input
	}
	var out bytes.Buffer
	json.HTMLEscape(&out, compact.Bytes())
	return out.Bytes()
}

// SignedBytes returns what the signature covers: every field that decides
// what the decision does.
func (d *ApprovalDecided) SignedBytes() []byte {
	verdict := "deny"
	if d.Approved {
		verdict = "approve"
	}
	return []byte(strings.Join([]string{
		"corral.approval.v1.decided", d.Tenant, d.Session.String(), d.Call.String(),
		d.ArgsHash, verdict, d.Reviewer, d.Reason,
	}, "\n"))
}

// Sign signs d with the approval service's private key.
func (d *ApprovalDecided) Sign(key ed25519.PrivateKey) {
	d.Signature = ed25519.Sign(key, d.SignedBytes())
}

// Verify reports whether d is a decision on the call of tenant and session
// with call ID call and hash argsHash, signed by key.
func (d *ApprovalDecided) Verify(key ed25519.PublicKey, tenant string, session, call uuid.UUID, argsHash string) error {
	switch {
	case len(key) != ed25519.PublicKeySize:
		return fmt.Errorf("no approval key")
	case d.Tenant != tenant || d.Session != session || d.Call != call:
		return fmt.Errorf("decision is for another call")
	case d.ArgsHash != argsHash:
		return fmt.Errorf("decision is for other arguments")
	case !ed25519.Verify(key, d.SignedBytes(), d.Signature):
		return fmt.Errorf("bad signature")
	}
	return nil
}

// LoadPrivateKey reads the private key that the environment variable name
// holds ([DecodePrivateKey]), or the file that name_FILE names holds. It
// returns nil, and no error, when neither is set.
func LoadPrivateKey(getenv func(string) string, name string) (ed25519.PrivateKey, error) {
	s, err := envconf.Secret(getenv, name)
	if err != nil || s == "" {
		return nil, err
	}
	k, err := DecodePrivateKey(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return k, nil
}

// DecodePublicKey reads an approval service's public key: 32 bytes in
// standard base64, as [EncodeKey] writes them.
func DecodePublicKey(s string) (ed25519.PublicKey, error) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("want an Ed25519 public key: %d bytes in base64", ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(b), nil
}

// DecodePrivateKey reads an approval service's private key: its 32-byte
// seed in standard base64, as [EncodeKey] writes it.
func DecodePrivateKey(s string) (ed25519.PrivateKey, error) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil || len(b) != ed25519.SeedSize {
		return nil, fmt.Errorf("want an Ed25519 private key seed: %d bytes in base64", ed25519.SeedSize)
	}
	return ed25519.NewKeyFromSeed(b), nil
}

// EncodeKey writes a key the way [DecodePublicKey] and [DecodePrivateKey]
// read it: a public key whole, a private key as its seed.
func EncodeKey[K ed25519.PublicKey | ed25519.PrivateKey](k K) string {
	switch k := any(k).(type) {
	case ed25519.PrivateKey:
		return base64.StdEncoding.EncodeToString(k.Seed())
	default:
		return base64.StdEncoding.EncodeToString(k.(ed25519.PublicKey))
	}
}
