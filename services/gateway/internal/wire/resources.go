package wire

import (
	"encoding/json"
	"time"
)

// Agent is an agent as the API shows it.
type Agent struct {
	Type        string            `json:"type"`
	ID          string            `json:"id"`
	Version     int               `json:"version"`
	Name        string            `json:"name"`
	Description string            `json:"description"`
	Model       ModelConfig       `json:"model"`
	System      string            `json:"system"`
	Tools       []Toolset         `json:"tools"`
	MCPServers  []any             `json:"mcp_servers"`
	Skills      []any             `json:"skills"`
	Multiagent  any               `json:"multiagent"`
	Metadata    map[string]string `json:"metadata"`
	CreatedAt   time.Time         `json:"created_at"`
	UpdatedAt   time.Time         `json:"updated_at"`
	ArchivedAt  *time.Time        `json:"archived_at"`
}

// ModelConfig is an agent's model: its ID as the client gave it.
type ModelConfig struct {
	ID string `json:"id"`
}

// Toolset is the one toolset Corral offers, agent_toolset_20260401: the
// six tools, each enabled or not.
type Toolset struct {
	Type          string       `json:"type"`
	DefaultConfig ToolConfig   `json:"default_config"`
	Configs       []ToolConfig `json:"configs"`
}

// ToolConfig is a tool's configuration in a [Toolset] (Name and Type
// empty in its default).
type ToolConfig struct {
	Type             string `json:"type,omitempty"`
	Name             string `json:"name,omitempty"`
	Enabled          bool   `json:"enabled"`
	PermissionPolicy Policy `json:"permission_policy"`
}

// Policy is a tool's permission policy: always_allow (the tenant's
// policy still decides, as for every session) or always_ask.
type Policy struct {
	Type string `json:"type"`
}

// ToolsetType is the type of Corral's toolset.
const ToolsetType = "agent_toolset_20260401"

// Session is a session as the API shows it.
type Session struct {
	Type               string            `json:"type"`
	ID                 string            `json:"id"`
	Agent              Agent             `json:"agent"`
	Status             string            `json:"status"`
	Title              string            `json:"title"`
	EnvironmentID      string            `json:"environment_id"`
	Metadata           map[string]string `json:"metadata"`
	Resources          []json.RawMessage `json:"resources"`
	VaultIDs           []string          `json:"vault_ids"`
	OutcomeEvaluations []any             `json:"outcome_evaluations"`
	Budget             any               `json:"budget"`
	DeploymentID       *string           `json:"deployment_id"`
	Stats              Stats             `json:"stats"`
	Usage              Usage             `json:"usage"`
	CreatedAt          time.Time         `json:"created_at"`
	UpdatedAt          time.Time         `json:"updated_at"`
	ArchivedAt         *time.Time        `json:"archived_at"`
}

// Stats are a session's times, in seconds.
type Stats struct {
	ActiveSeconds   float64 `json:"active_seconds"`
	DurationSeconds float64 `json:"duration_seconds"`
}

// Usage is a session's tokens, and its cost at the gateway's prices.
type Usage struct {
	InputTokens          int    `json:"input_tokens"`
	OutputTokens         int    `json:"output_tokens"`
	CacheReadInputTokens int    `json:"cache_read_input_tokens"`
	ListCost             *Money `json:"list_cost"`
}

// Money is an amount of a currency.
type Money struct {
	Amount   string `json:"amount"`
	Currency string `json:"currency"`
}

// Environment is an environment as the API shows it: a Corral environment,
// whose ID is its name.
type Environment struct {
	Type        string            `json:"type"`
	ID          string            `json:"id"`
	Name        string            `json:"name"`
	Description string            `json:"description"`
	Config      EnvironmentConfig `json:"config"`
	Metadata    map[string]string `json:"metadata"`
	Scope       string            `json:"scope,omitempty"`
	CreatedAt   string            `json:"created_at"`
	UpdatedAt   string            `json:"updated_at"`
	ArchivedAt  *string           `json:"archived_at"`
}

// EnvironmentConfig is an environment's "cloud" configuration: the
// packages its layer installs and the hosts it reaches.
type EnvironmentConfig struct {
	Type       string     `json:"type"`
	Packages   Packages   `json:"packages"`
	Networking Networking `json:"networking"`
}

// Packages are an environment's packages by manager.
type Packages struct {
	Type  string   `json:"type,omitempty"`
	Apt   []string `json:"apt"`
	Cargo []string `json:"cargo"`
	Gem   []string `json:"gem"`
	Go    []string `json:"go"`
	NPM   []string `json:"npm"`
	Pip   []string `json:"pip"`
}

// Networking is what an environment's sessions reach: always "limited"
// to its hosts (besides what the tenant's policy allows).
type Networking struct {
	Type                 string   `json:"type"`
	AllowedHosts         []string `json:"allowed_hosts"`
	AllowPackageManagers bool     `json:"allow_package_managers"`
	AllowMCPServers      bool     `json:"allow_mcp_servers"`
}

// Deleted answers a deletion.
type Deleted struct {
	Type string `json:"type"`
	ID   string `json:"id"`
}
