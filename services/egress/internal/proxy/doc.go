// Package proxy is the egress service's HTTP forward proxy: the one way
// out of every sandbox with network.
//
// One [Proxy] serves many sandboxes. The service gives [Proxy.Serve] a
// listener per sandbox (a Unix socket its executor relays to) and the
// sandbox's [egressapi.Identity]; every connection on that listener speaks
// for that identity, whatever it sends. Identity-looking headers
// (X-Corral-*) are dropped, as are Proxy-Authorization, Proxy-Connection
// and the other hop-by-hop headers.
//
// The proxy speaks what git, pip, npm, go and curl send to a proxy named
// in HTTP_PROXY and HTTPS_PROXY:
//
//   - An absolute-form request ("GET http://host/path") is plain HTTP: it
//     is judged with its method and path and forwarded, never with a
//     credential.
//   - A CONNECT is judged with method and path unknown. A denial is
//     answered 403 with the rule and its reason. An allowed host that no
//     credential is bound to is tunnelled: once the client's TLS
//     ClientHello names the CONNECT's host (an IP address may go
//     unnamed), bytes are spliced both ways and never read. Otherwise,
//     when the decision turns on method or path, when it is approve, or
//     when a credential is bound to the host, the connection is
//     intercepted: the proxy terminates TLS with a certificate for the
//     host signed by its own CA (which sandboxes trust), judges each
//     request, injects the credentials [Credentials] gives and forwards it
//     over verified TLS to the CONNECT's host, whatever Host the request
//     names.
//
// A request the policy sends for approval (a git push, typically) is
// given to the [Holder] with what binds an approval to it: the ref
// updates of a push, the SHA-256 of any other body. Until a reviewer
// approves, it is refused with the approval's ID; the same request sent
// again once approved passes, once.
//
// Responses to a request that carried a credential have every secret of
// it replaced by "[REDACTED]", in headers and streamed bodies alike, so
// that nothing the sandbox is not to see comes back into it.
//
// The proxy resolves names itself and never dials loopback, private,
// link-local, multicast or unspecified addresses (where the node, NATS
// and the database live) unless [Config.AllowPrivate] says so.
//
// Every request, tunnel and refusal is given to the [Recorder] as an
// [Entry].
package proxy
