package egressapi

import (
	"time"

	"corral.dev/pkg/bus"
)

// Operations of the vault API.
const (
	OpCreate = "create"
	OpList   = "ls"
	OpRotate = "rotate"
	OpRemove = "rm"
	// OpUpdate replaces a vault's label and metadata, and its secret
	// when the request carries one; its bindings stay.
	OpUpdate = "update"
	// OpArchive drops a vault's secret for good and keeps what it was:
	// it goes into no request any more, and is still listed.
	OpArchive = "archive"
)

// VaultSubject is where a client acting as user of tenant asks for op on
// the user's own vaults:
//
//	corral.vault.<tenant>.<user token>.<op>
//
// The service takes tenant and user from the subject, never from the
// body; the NATS permissions let a client publish only as itself. Listing
// there shows the tenant's vaults too.
func VaultSubject(tenant, user, op string) string {
	return bus.VaultAPI(tenant, bus.UserToken(user), op)
}

// TenantVaultSubject is where a reviewer of tenant asks for op on the
// vaults every session of the tenant may use:
//
//	corral.vault.<tenant>.tenant.<op>
func TenantVaultSubject(tenant, op string) string {
	return bus.VaultAPI(tenant, bus.VaultTenantScope, op)
}

// Vault is one credential as anyone but the egress service sees it: never
// its secret.
type Vault struct {
	Name string `json:"name"`
	// User is the user whose sessions may use it, "" for every session of
	// the tenant.
	User string `json:"user,omitempty"`
	// Hosts are the hosts it may be sent to: exact names, or "*.example.com"
	// for any name under example.com.
	Hosts []string `json:"hosts"`
	// Paths, when set, bound it further to requests whose path starts
	// with one of them.
	Paths  []string  `json:"paths,omitempty"`
	Inject Injection `json:"inject"`
	// Version counts its secrets: 1 when created, one more per rotation.
	Version   int       `json:"version"`
	CreatedAt time.Time `json:"created_at"`
	RotatedAt time.Time `json:"rotated_at,omitzero"`
	// Group, on a tenant's own vault, is the group it is a credential of:
	// a session that names groups ([Identity].Vaults) gets the
	// credentials of those alone. The HTTP API's vaults are groups, its
	// credentials vaults. It is set when the vault is made, and stays.
	Group string `json:"group,omitempty"`
	// Label and Metadata are the client's own words about it (the HTTP
	// API's display_name and metadata); egress reads neither.
	Label    string            `json:"label,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
	// UpdatedAt is when it last changed; ArchivedAt when it was
	// archived ([OpArchive]): its secret is gone.
	UpdatedAt  time.Time `json:"updated_at,omitzero"`
	ArchivedAt time.Time `json:"archived_at,omitzero"`
}

// Injection says how a secret goes into a request. Exactly one of Header
// and BasicUser is set.
type Injection struct {
	// Header is a header set to Prefix followed by the secret, replacing
	// any the sandbox sent ("Authorization" with "Bearer ", say).
	Header string `json:"header,omitempty"`
	Prefix string `json:"prefix,omitempty"`
	// BasicUser makes the secret the password of HTTP basic
	// authentication as this user (git over HTTPS takes a token so).
	BasicUser string `json:"basic_user,omitempty"`
}

// VaultRequest is a request of the vault API. Create names a new vault
// with its bindings and secret; rotate names one and its new secret;
// update names one, its new label and metadata, and maybe a new secret;
// rm and archive name one; ls names none.
type VaultRequest struct {
	Vault
	Secret string `json:"secret,omitempty"`
}

// VaultReply answers a [VaultRequest]: the vault made, rotated or
// removed, or the vaults listed. A refused request is answered with a
// NATS service error instead (its code in the Nats-Service-Error-Code
// header): one of the Code constants.
type VaultReply struct {
	Vault  *Vault  `json:"vault,omitempty"`
	Vaults []Vault `json:"vaults,omitempty"`
}

// Error codes of the vault API.
const (
	CodeBadRequest = "400"
	CodeNotFound   = "404"
	CodeExists     = "409"
	CodeInternal   = "500"
)
