package wire

import "time"

// Vault is a vault as the API shows it.
type Vault struct {
	Type        string            `json:"type"`
	ID          string            `json:"id"`
	DisplayName string            `json:"display_name"`
	Metadata    map[string]string `json:"metadata"`
	CreatedAt   time.Time         `json:"created_at"`
	UpdatedAt   time.Time         `json:"updated_at"`
	ArchivedAt  *time.Time        `json:"archived_at"`
}

// Credential is a vault's credential as the API shows it: never its
// secret.
type Credential struct {
	Type        string            `json:"type"`
	ID          string            `json:"id"`
	VaultID     string            `json:"vault_id"`
	DisplayName *string           `json:"display_name"`
	Metadata    map[string]string `json:"metadata"`
	Auth        HostAuth          `json:"auth"`
	CreatedAt   time.Time         `json:"created_at"`
	UpdatedAt   time.Time         `json:"updated_at"`
	ArchivedAt  *time.Time        `json:"archived_at"`
}

// HostAuthType is the type of the one credential Corral holds: a secret
// egress adds to the sandbox's requests to the hosts it binds, as a
// header or as HTTP basic authentication.
const HostAuthType = "corral_host"

// HostAuth is a credential of type [HostAuthType] as the API shows it.
// Exactly one of Header and BasicUser is set.
type HostAuth struct {
	Type         string   `json:"type"`
	AllowedHosts []string `json:"allowed_hosts"`
	PathPrefixes []string `json:"path_prefixes"`
	Header       string   `json:"header,omitempty"`
	Prefix       string   `json:"prefix,omitempty"`
	BasicUser    string   `json:"basic_user,omitempty"`
}
