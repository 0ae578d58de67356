// Package egressapi is the contract of the egress service, the sandboxes'
// only way out: what a sandbox sees of it (the directory bound into it,
// the proxy's port, its environment), the control protocol the
// sandbox-manager speaks to the node's egress service over a Unix socket,
// the per-call summary of what went out, and the vault API clients call
// over NATS.
package egressapi

import (
	"slices"

	"github.com/google/uuid"
)

// What a sandbox with network sees.
const (
	// SandboxDir is where the sandbox-manager binds, read-only, the host
	// directory the egress service made for the sandbox (see [Reply.Dir]).
	SandboxDir = "/run/corral/egress"
	// SocketName is the Unix socket in that directory: every connection to
	// it speaks for the sandbox it was made for, and no other.
	SocketName = "egress.sock"
	// CABundleName is the CA bundle in that directory: the host's trusted
	// roots and the egress service's CA.
	CABundleName = "ca.pem"
	// ProxyPort is the port on the sandbox's own loopback where its
	// executor accepts connections and relays each to the socket.
	ProxyPort = 3128
)

// ProxyURL is the proxy as a sandboxed program names it.
const ProxyURL = "http://127.0.0.1:3128"

// SandboxEnv is what a sandbox with network has in its environment beyond
// the usual: the proxy, for the programs that read either spelling, and
// the CA bundle, for each program's own variable.
func SandboxEnv() [][2]string {
	ca := SandboxDir + "/" + CABundleName
	return [][2]string{
		{"HTTP_PROXY", ProxyURL}, {"http_proxy", ProxyURL},
		{"HTTPS_PROXY", ProxyURL}, {"https_proxy", ProxyURL},
		{"NO_PROXY", "localhost,127.0.0.1"}, {"no_proxy", "localhost,127.0.0.1"},
		{"SSL_CERT_FILE", ca},
		{"REQUESTS_CA_BUNDLE", ca},
		{"PIP_CERT", ca},
		{"NODE_EXTRA_CA_CERTS", ca},
		// npm takes its own CA file over Node's, and a system npmrc
		// (Debian's) may name one.
		{"npm_config_cafile", ca},
		{"GIT_SSL_CAINFO", ca},
		{"CURL_CA_BUNDLE", ca},
	}
}

// Identity is who a sandbox's requests speak for. The sandbox-manager,
// which made the sandbox, gives it when it opens the sandbox's socket;
// nothing a sandbox sends can change it.
type Identity struct {
	Tenant  string    `json:"tenant"`
	User    string    `json:"user"`
	Session uuid.UUID `json:"session"`
	// Environment is the session's environment, "" for none, and
	// EnvironmentVersion the version of its definition the session
	// uses: egress lets the sandbox reach, beyond the policy, what that
	// version's definition allows (see package environmentapi).
	Environment        string `json:"environment,omitempty"`
	EnvironmentVersion string `json:"environment_version,omitempty"`
	// Phase is "" for a session's own sandbox, and [PhaseSetup] for the
	// sandbox that builds an environment's layer.
	Phase string `json:"phase,omitempty"`
	// Fetch, when set, is the URL of a git repository the sandbox is
	// preparing the workspace from: it may fetch from that repository
	// over git's smart HTTP, with the credentials egress injects, and
	// reach nothing else. The agent's own sandbox never has one.
	Fetch string `json:"fetch,omitempty"`
	// Vaults, when set, are the groups of the tenant's vaults (see
	// [Vault].Group) whose credentials alone go into the sandbox's
	// requests, as the session's first request named them; when not,
	// every vault of the tenant and the user that binds a request's host
	// may.
	Vaults []string `json:"vaults,omitempty"`
}

// Equal reports whether id and other speak for the same sandbox in the
// same way.
func (id Identity) Equal(other Identity) bool {
	return id.Tenant == other.Tenant && id.User == other.User && id.Session == other.Session &&
		id.Environment == other.Environment && id.EnvironmentVersion == other.EnvironmentVersion &&
		id.Phase == other.Phase && id.Fetch == other.Fetch && slices.Equal(id.Vaults, other.Vaults)
}

// PhaseSetup is the [Identity].Phase of the sandbox that runs an
// environment's setup: it builds a layer every session of the tenant
// shares, so it speaks for no user (User is "": only the tenant's own
// vaults' credentials go into its requests), and Session names the build,
// not any session.
const PhaseSetup = "setup"

// Operations of the control protocol.
const (
	// OpOpen makes (or finds) the socket of a session's sandbox: the reply
	// says whether the policy, or the session's environment, may let it
	// reach any host and, if so, which host directory to bind at
	// [SandboxDir]. Opening a session again
	// returns the same directory, with the identity given last.
	OpOpen = "open"
	// OpDrain returns what the session's sandbox sent since the last
	// drain, and forgets it.
	OpDrain = "drain"
	// OpClose removes the session's socket and directory.
	OpClose = "close"
)

// Request is one line the sandbox-manager sends on the node's control
// socket, answered by one [Reply] line; then the connection closes.
type Request struct {
	Op       string   `json:"op"`
	Identity Identity `json:"identity"`
}

// Reply answers a [Request].
type Reply struct {
	// Error says why the request failed; the other fields are then empty.
	Error string `json:"error,omitempty"`
	// Network is set by open when some rule may let the sandbox reach a
	// host; a sandbox without gets nothing of egress.
	Network bool `json:"network,omitempty"`
	// Dir is the host directory to bind at [SandboxDir], set by open when
	// Network is.
	Dir string `json:"dir,omitempty"`
	// Summary is what drain found.
	Summary *Summary `json:"summary,omitempty"`
}
