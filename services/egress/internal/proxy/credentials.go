package proxy

import (
	"context"

	"corral.dev/pkg/egressapi"
)

// Credentials finds what to inject into a request. Its methods must be
// safe for concurrent use; ctx is the request's.
type Credentials interface {
	// Bound reports whether a credential of id may be sent to host, so
	// that a CONNECT to it is intercepted.
	Bound(ctx context.Context, id egressapi.Identity, host string) (bool, error)
	// For returns what to inject into a request to host and path (decoded,
	// without the query): headers to set (replacing any the client sent)
	// and the strings (secrets, and their encoded forms) never to let back
	// into the sandbox. It is asked only about HTTPS requests.
	For(ctx context.Context, id egressapi.Identity, host, path string) (Injection, error)
}

// Injection is what [Credentials.For] puts into one request.
type Injection struct {
	// Headers are set on the request, each replacing any value the
	// client sent.
	Headers map[string]string
	// Redact are replaced with [Redacted] in the response's headers,
	// body and trailers.
	Redact []string
}

// noCredentials is the [Credentials] of a proxy given none.
type noCredentials struct{}

func (noCredentials) Bound(context.Context, egressapi.Identity, string) (bool, error) {
	return false, nil
}

func (noCredentials) For(context.Context, egressapi.Identity, string, string) (Injection, error) {
	return Injection{}, nil
}
