package upstreamtest

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// Upstream is an HTTPS server standing in for an outside host. Create it
// with [Start], [PyPI] or [NPM], or as part of a [GitServer]. Its fields
// must not be changed.
//
// The server listens on 127.0.0.1 only; the host's DNS name resolves
// nowhere. A client reaches it through a proxy that dials Addr for Host
// (and for Host:443), at URL, or directly at DirectURL.
type Upstream struct {
	// Host is the DNS name the test gives the server, such as
	// "git.example.test".
	Host string
	// Addr is where the server listens: "127.0.0.1:port".
	Addr string
	// URL is "https://" + Host, with no port: the URL a client uses when
	// a proxy dials Addr for Host:443.
	URL string
	// DirectURL is "https://" + Addr, for a client that talks to the
	// server without a proxy; the certificate is valid for 127.0.0.1.
	DirectURL string

	mu       sync.Mutex
	requests []string
	auths    []string
}

// Start serves h over HTTPS on 127.0.0.1, with a certificate from ca valid
// for host and 127.0.0.1, until the test ends. Every request is recorded
// (see [Upstream.Requests] and [Upstream.Authorizations]) before h sees it.
func Start(t testing.TB, ca *CA, host string, h http.Handler) *Upstream {
	t.Helper()
	u := &Upstream{Host: host, URL: "https://" + host}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.record(r)
		h.ServeHTTP(w, r)
	}))
	srv.TLS = ca.ServerTLS(t, host)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	u.Addr = srv.Listener.Addr().String()
	u.DirectURL = "https://" + u.Addr
	return u
}

// Requests returns "METHOD /path?query" for every request received so far,
// in order. It is safe to call while requests are served.
func (u *Upstream) Requests() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.requests...)
}

// Authorizations returns the Authorization header of every request that
// carried one, in order, so a test can check that a credential arrived (or
// that it did not). It is safe to call while requests are served.
func (u *Upstream) Authorizations() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.auths...)
}

func (u *Upstream) record(r *http.Request) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.requests = append(u.requests, r.Method+" "+r.URL.RequestURI())
	if a := r.Header.Get("Authorization"); a != "" {
		u.auths = append(u.auths, a)
	}
}

// Package is one version of a package that [PyPI] or [NPM] serves, as the
// archive each builds from it: a wheel holding the module <name>.py, or an
// npm tarball holding index.js, whose contents are Content.
type Package struct {
	// Name is the package's name, as clients ask for it.
	Name string
	// Version is the version, which must be valid for the registry: PEP 440
	// for [PyPI] ("1.0"), semver for [NPM] ("1.0.0").
	Version string
	// Content is the source of the package's one module.
	Content string
}
