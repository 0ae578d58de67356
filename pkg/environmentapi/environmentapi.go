// Package environmentapi is the contract of the tenants' environments
// (package environment) between the services and their clients: the
// sandbox-managers' environment API, which `corral environments` speaks
// without importing any service, and the bucket [bus.BucketEnvironments]
// the harness, egress and the sandbox-managers read (see [Resolve] and
// [Lookup]).
//
// The bucket keeps each environment under [Key], <tenant>.<name>, as an
// [Entry]: its definition, its version and, once a sandbox-manager built
// that version's layer, the build. The tenant's default is the name kept
// under [DefaultKey], <tenant>._default: one key, so that a tenant never
// has two defaults, whatever writes race. The bucket keeps the last
// [bus.EnvironmentHistory] writes of each key: a session keeps the version
// of the definition it started with (egress lets it reach what that
// version allows, and a node that never built it builds it) while its
// definition is among them; removing an environment removes them all.
package environmentapi

import (
	"time"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/environment"
)

// Operations of the API: the last token of its subjects.
const (
	// OpList lists the tenant's environments ([Reply].Environments) and
	// names its default.
	OpList = "ls"
	// OpShow shows the environment [Request].Name names.
	OpShow = "show"
	// OpPut creates the environment [Request].Spec defines, or replaces
	// the one of its name, and makes it the default with
	// [Request].Default. A reviewer's or an operator's.
	OpPut = "put"
	// OpRemove removes the environment [Request].Name names, and the
	// tenant's default if it was (the reply's Environment, as it was
	// removed, says so). A reviewer's or an operator's.
	OpRemove = "rm"
	// OpDefault makes the environment [Request].Name names the tenant's
	// default, or leaves the tenant none when Name is "". A reviewer's or
	// an operator's.
	OpDefault = "default"
)

// Writes reports whether op changes the tenant's environments: such an op
// is answered only on [TenantSubject], which only a reviewer's or an
// operator's credential may publish on, since an environment decides what
// its sessions may reach on the network.
func Writes(op string) bool {
	return op == OpPut || op == OpRemove || op == OpDefault
}

// Subject is where a client acting as user of tenant reads ([OpList],
// [OpShow]):
//
//	corral.environment.<tenant>.<user token>.<op>
//
// The service takes the tenant from the subject, never from the body: the
// NATS permissions let a client publish only for its own tenant.
func Subject(tenant, user, op string) string {
	return bus.EnvironmentAPI(tenant, bus.UserToken(user), op)
}

// TenantSubject is where a reviewer or an operator of tenant changes its
// environments ([OpPut], [OpRemove], [OpDefault]), and may read them too:
//
//	corral.environment.<tenant>.tenant.<op>
func TenantSubject(tenant, op string) string {
	return bus.EnvironmentAPI(tenant, bus.VaultTenantScope, op)
}

// Request is a request of the API. OpShow, OpRemove and OpDefault name an
// environment; OpPut gives a definition; OpList gives nothing.
type Request struct {
	Name string            `json:"name,omitempty"`
	Spec *environment.Spec `json:"spec,omitempty"`
	// Default, with OpPut, makes the environment the tenant's default.
	Default bool `json:"default,omitempty"`
}

// Outcomes of [OpPut].
const (
	Created   = "created"
	Changed   = "changed"
	Unchanged = "unchanged"
)

// Reply answers a [Request]: the environment shown, put or removed, or
// those listed, and the tenant's default after the request ("" for none).
// A refused request is answered with a NATS service error instead (its
// code in the Nats-Service-Error-Code header): one of the Code constants.
type Reply struct {
	Environment  *Environment  `json:"environment,omitempty"`
	Environments []Environment `json:"environments,omitempty"`
	// Outcome is what [OpPut] did: [Created], [Changed] or [Unchanged].
	Outcome string `json:"outcome,omitempty"`
	Default string `json:"default,omitempty"`
}

// Environment is an environment as the API shows it: its entry, and
// whether it is the tenant's default.
type Environment struct {
	Entry
	Default bool `json:"default,omitempty"`
}

// Entry is an environment as the bucket keeps it under [Key].
type Entry struct {
	Spec environment.Spec `json:"spec"`
	// Version is the definition's version ([environment.Spec.Version]),
	// as computed when it was put.
	Version string `json:"version"`
	// Built is the last build of a version of it recorded, nil for none.
	Built     *Built    `json:"built,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
}

// IsBuilt reports whether the layer of e's version was built.
func (e *Entry) IsBuilt() bool { return e.Built != nil && e.Built.Version == e.Version }

// Built is a layer's build, as the sandbox-manager that built it records
// it.
type Built struct {
	Version string    `json:"version"`
	At      time.Time `json:"at"`
	SetupMS int64     `json:"setup_ms"`
}

// Key is the key of tenant's environment name in [bus.BucketEnvironments].
func Key(tenant, name string) string { return tenant + "." + name }

// DefaultKey is the key of tenant's default in [bus.BucketEnvironments]:
// no environment's name starts with "_".
func DefaultKey(tenant string) string { return tenant + "._default" }

// DefaultEntry is what [DefaultKey] holds.
type DefaultEntry struct {
	Name string `json:"name"`
}

// Error codes of the API, in the Nats-Service-Error-Code header: a request
// refused as written (an invalid definition, say), a write on a user's
// subject, an environment not found, and the service's own failure.
const (
	CodeBadRequest = "400"
	CodeForbidden  = "403"
	CodeNotFound   = "404"
	CodeInternal   = "500"
)
