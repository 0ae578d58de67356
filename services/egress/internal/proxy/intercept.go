package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync"
)

// intercept terminates the TLS of a CONNECT to t and hands the connection
// to the session's server, which reads its requests (see
// serveIntercepted).
func (s *session) intercept(w http.ResponseWriter, r *http.Request, t Target) {
	c, br, err := s.hijack(w)
	if err != nil {
		s.p.log.DebugContext(r.Context(), "intercept hijack failed", "host", t.Host, "err", err)
		return
	}
	tc := tls.Server(&clientConn{Conn: c, r: br, host: t.Host}, s.p.tls)
	ctx, cancel := context.WithTimeout(r.Context(), helloTimeout)
	err = tc.HandshakeContext(ctx)
	cancel()
	s.untrack(c) // closed below, or the server's from now on
	if err != nil {
		c.Close()
		if errors.Is(err, errServerName) {
			e := Entry{Target: t, Status: http.StatusForbidden, Refused: true, Reason: err.Error()}
			e.Method = http.MethodConnect
			s.record(r.Context(), e)
			return
		}
		s.p.log.DebugContext(r.Context(), "intercepted handshake failed", "host", t.Host, "err", err)
		return
	}
	if !s.inner.push(&intercepted{Conn: tc, target: t}) {
		tc.Close()
	}
}

// serveIntercepted handles a request read inside an intercepted CONNECT:
// it goes to the CONNECT's host, whatever the request names.
func (s *session) serveIntercepted(w http.ResponseWriter, r *http.Request, c *intercepted) {
	if r.Method == http.MethodConnect {
		http.Error(w, "corral egress: CONNECT inside CONNECT", http.StatusMethodNotAllowed)
		return
	}
	s.serveRequest(w, r, c.target, true)
}

// interceptTLS is the TLS configuration of intercepted connections: a
// certificate for the CONNECT's host signed by the proxy's CA, HTTP/1.1
// only. One configuration serves every connection, so that its session
// tickets resume across them.
func (p *Proxy) interceptTLS() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			return nil, checkServerName(h.ServerName, h.Conn.(*clientConn).host)
		},
		GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
			return p.leaves.get(h.Conn.(*clientConn).host)
		},
	}
}

// clientConn is a hijacked CONNECT's connection, read through the
// server's buffer, with the CONNECT's host.
type clientConn struct {
	net.Conn
	r    *bufio.Reader
	host string
}

func (c *clientConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// intercepted is a connection whose TLS the proxy terminated, with the
// target of its CONNECT. It does not look like a *tls.Conn to the server,
// which thus leaves TLS alone.
type intercepted struct {
	net.Conn
	target Target
}

// interceptKey is the context key of a request's *intercepted connection.
type interceptKey struct{}

// interceptContext is the server's ConnContext: it gives the requests of
// an intercepted connection their target.
func interceptContext(ctx context.Context, c net.Conn) context.Context {
	if ic, ok := c.(*intercepted); ok {
		return context.WithValue(ctx, interceptKey{}, ic)
	}
	return ctx
}

// connQueue is a listener whose connections are pushed to it: the
// intercepted ones, once their TLS is terminated.
type connQueue struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newConnQueue(addr net.Addr) *connQueue {
	return &connQueue{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

// push hands c to Accept; it returns false, leaving c alone, when the
// queue is closed.
func (q *connQueue) push(c net.Conn) bool {
	select {
	case q.conns <- c:
		return true
	case <-q.done:
		return false
	}
}

func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.conns:
		return c, nil
	case <-q.done:
		return nil, net.ErrClosed
	}
}

func (q *connQueue) Close() error {
	q.once.Do(func() { close(q.done) })
	return nil
}

func (q *connQueue) Addr() net.Addr { return q.addr }
