// Package egress is the sandboxes' only way out of their node: an HTTP
// forward proxy (plain requests and CONNECT) that every sandbox with
// network reaches through a Unix socket of its own, bound into it by the
// sandbox-manager, so that every request speaks for the session whose
// sandbox made it, whatever it says.
//
// Each request is judged by the policy's egress rules (package policy):
// allowed, refused with the rule and its reason, or held for a reviewer,
// whose signed approval lets that very request through once. A host
// allowed as a whole is tunnelled after its TLS server name is checked;
// one whose decision depends on the method or path, or that a vault
// credential is bound to, is intercepted: its TLS is terminated with the
// service's CA, which the sandboxes trust, each request judged and the
// credential injected, and forwarded over verified TLS. The secret never
// reaches the sandbox: answers that echo it are redacted.
//
// A session's environment (package environment) may allow more: a
// request no rule holds for, which the policy denies by default, passes
// when it goes to one of the hosts the environment's definition names
// (see environments.go); an environment's setup is judged the same way,
// but never waits for a reviewer.
//
// The vaults live sealed in a bucket only this service may read; the
// vault API (corral vaults) creates, lists, rotates and removes them.
// What each sandbox sent is summed up per call for the sandbox-manager,
// which records it with the call's result, and counted in metrics.
//
// The control socket is the sandbox-manager's way in: see package
// egressapi for its protocol.
package egress
