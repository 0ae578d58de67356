// Package upstreamtest fakes, for tests, the outside hosts that sandboxed
// programs reach through the egress proxy: HTTPS servers on 127.0.0.1 that
// speak the real protocols, so the real git, pip and npm are exercised
// end to end. Nothing here is mocked below the wire.
//
// A [CA] signs each server's certificate; give its PEM ([CA.WriteFile]) to
// the clients, or its [CA.Pool] to a proxy that dials the servers. Every
// certificate names the server's DNS host and the IP 127.0.0.1, so a test
// can reach a server either through a proxy that resolves the host to
// [Upstream.Addr], or directly at [Upstream.DirectURL].
//
//	ca := upstreamtest.NewCA(t)
//	gs := upstreamtest.Git(t, ca, "git.example.test", "s3cret")
//	path := gs.NewRepo(t, "corral", map[string]string{"README.md": "hi\n"})
//	// git clone gs.URL+path, through a proxy told to dial gs.Addr for gs.Host
//	py := upstreamtest.PyPI(t, ca, "pypi.example.test", upstreamtest.Package{Name: "hello", Version: "1.0", Content: "X = 1\n"})
//	js := upstreamtest.NPM(t, ca, "npm.example.test", upstreamtest.Package{Name: "hello", Version: "1.0.0", Content: "module.exports = 1\n"})
//
// The servers are [Git] (smart HTTP, served by git's own http-backend, with
// a token), [PyPI] (a PEP 503 simple index serving wheels it builds) and
// [NPM] (a registry serving packuments and tarballs it builds); [Start]
// serves any other handler the same way. Each stops when its test ends.
//
// [LookPath] and [Pip] find the real clients, skipping a test whose client
// is missing, or failing it when CI=true.
package upstreamtest
