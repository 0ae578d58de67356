// Package credential is who a client of Corral is: a credential grants one
// tenant, and either one user of it or, for a bot or a reviewer, the right
// to speak for any user of it. The NATS server asks Corral's auth service
// about every client connection (auth callout); the service finds the
// credential in the credentials bucket and answers with the permissions
// [Credential.Permissions] computes, so that every subject a client may
// publish or read names its own tenant (and its own user): tenant and user
// then come from where a message is, never from what it says.
//
// A client signs in with the credential's ID as its user name and the
// secret as its password, and takes its inbox subjects under
// [Credential.Inbox] (nats.CustomInboxPrefix), the only ones it may
// subscribe to: replies to other clients never reach it.
package credential

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
)

// Role is what a credential may do in its tenant.
type Role string

// Roles.
const (
	// RoleUser acts as one user: its requests, memory calls and
	// follow-ups are that user's.
	RoleUser Role = "user"
	// RoleBot speaks for any user of its tenant (a chat bridge, a batch
	// submitter): it names the user in each subject.
	RoleBot Role = "bot"
	// RoleReviewer is a bot that also decides approvals.
	RoleReviewer Role = "reviewer"
	// RoleOperator is a reviewer of every tenant (its tenant is
	// [AllTenants]): for the people who run the platform, such as the
	// developer of corral dev.
	RoleOperator Role = "operator"
)

// AllTenants is the tenant of an operator's credential.
const AllTenants = "*"

// Credential is a client credential as kept in the credentials bucket,
// under its ID. The secret itself is not kept, only its hash.
type Credential struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	// User is the user a RoleUser credential acts as; for a bot or a
	// reviewer, who holds it (a reviewer's decisions are signed with it).
	User  string `json:"user"`
	Role  Role   `json:"role"`
	Label string `json:"label,omitempty"`
	// SecretHash is the hex SHA-256 of the secret.
	SecretHash string    `json:"secret_sha256"`
	Created    time.Time `json:"created"`
}

var idRE = regexp.MustCompile(`^c-[0-9a-f]{32}$`)

// ErrInvalid is returned for a credential that cannot be issued or used.
var ErrInvalid = errors.New("invalid credential")

// New returns a new credential and its secret, which only the caller ever
// sees.
func New(tenant, user string, role Role, label string) (Credential, string, error) {
	c := Credential{
		ID:     "c-" + strings.ReplaceAll(uuid.Must(uuid.NewV7()).String(), "-", ""),
		Tenant: tenant, User: user, Role: role, Label: label,
		Created: time.Now().UTC(),
	}
	if err := c.Validate(); err != nil {
		return Credential{}, "", err
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return Credential{}, "", err
	}
	secret := base64.RawURLEncoding.EncodeToString(b)
	c.SecretHash = hash(secret)
	return c, secret, nil
}

// Validate reports what is wrong with c, if anything.
func (c Credential) Validate() error {
	switch {
	case !idRE.MatchString(c.ID):
		return fmt.Errorf("%w: id %q", ErrInvalid, c.ID)
	case (c.Role == RoleOperator) != (c.Tenant == AllTenants):
		return fmt.Errorf("%w: an operator, and only an operator, has every tenant (%q)", ErrInvalid, AllTenants)
	case c.Role != RoleOperator && event.CheckTenant(c.Tenant) != nil:
		return fmt.Errorf("%w: %w", ErrInvalid, event.CheckTenant(c.Tenant))
	case strings.TrimSpace(c.User) == "" || len(c.User) > 256:
		return fmt.Errorf("%w: user must be 1-256 characters", ErrInvalid)
	}
	switch c.Role {
	case RoleUser, RoleBot, RoleReviewer, RoleOperator:
	default:
		return fmt.Errorf("%w: role %q: want user, bot, reviewer or operator", ErrInvalid, c.Role)
	}
	return nil
}

// IsID reports whether name may be a credential's ID: how the auth
// service tells a client's sign-in from anything else.
func IsID(name string) bool { return idRE.MatchString(name) }

// Check reports whether secret is c's.
func (c Credential) Check(secret string) bool {
	want, err := hex.DecodeString(c.SecretHash)
	if err != nil || len(want) != sha256.Size {
		return false
	}
	got := sha256.Sum256([]byte(secret))
	return subtle.ConstantTimeCompare(got[:], want) == 1
}

func hash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// Inbox is the inbox prefix a client signed in with c must use: the
// only subjects it may subscribe to are below it.
func (c Credential) Inbox() string { return Inbox(c.ID) }

// Inbox is the inbox prefix of the credential with ID id.
func Inbox(id string) string { return bus.InboxPrefix(id) }
