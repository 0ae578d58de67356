package proxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// helloTimeout bounds how long a client may take, once its CONNECT is
// answered, to send its TLS ClientHello and finish a handshake.
const helloTimeout = 10 * time.Second

// serveConnect judges a CONNECT and refuses, tunnels or intercepts it.
func (s *session) serveConnect(w http.ResponseWriter, r *http.Request) {
	t, err := parseTarget("https", r.Host)
	if err != nil {
		http.Error(w, "corral egress: CONNECT: "+err.Error(), http.StatusBadRequest)
		return
	}
	v := s.p.judge.Judge(s.id, t)
	e := Entry{Target: t, Verdict: v}
	e.Method = http.MethodConnect
	if v.Known && v.Decision != Allow && v.Decision != Approve {
		refuse(w, &e, v.Rule, denial(v, t))
		s.record(r.Context(), e)
		return
	}
	// Read the requests when the policy must see them, or when one may
	// carry a credential.
	intercept := !v.Known || v.Decision == Approve
	if !intercept {
		bound, err := s.p.creds.Bound(r.Context(), s.id, t.Host)
		if err != nil {
			s.p.log.WarnContext(r.Context(), "credentials lookup failed", "host", t.Host, "err", err)
			fail(w, &e, http.StatusServiceUnavailable, "look up credentials: "+err.Error())
			s.record(r.Context(), e)
			return
		}
		intercept = bound
	}
	if intercept {
		s.intercept(w, r, t)
		return
	}
	s.tunnel(w, r, e)
}

// hijack answers a CONNECT 200 and takes its connection over, tracked
// until the caller calls untrack. It returns the connection and a reader
// of it that starts with what the server had buffered.
func (s *session) hijack(w http.ResponseWriter) (net.Conn, *bufio.Reader, error) {
	c, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil, nil, err
	}
	if !s.track(c) {
		return nil, nil, net.ErrClosed
	}
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		s.untrack(c)
		c.Close()
		return nil, nil, err
	}
	return c, rw.Reader, nil
}

// errServerName refuses a TLS connection that names another server than
// its CONNECT.
var errServerName = errors.New("TLS server name does not match the CONNECT's host")

// checkServerName checks the server name (SNI) a ClientHello gives
// against host, the CONNECT's: they must be equal, but an IP address may
// go unnamed.
func checkServerName(name, host string) error {
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	if name == host || name == "" && validIP(host) {
		return nil
	}
	return &serverNameError{name: name, host: host}
}

// serverNameError is a mismatch of a ClientHello's server name and the
// CONNECT's host; it matches [errServerName].
type serverNameError struct{ name, host string }

func (e *serverNameError) Error() string {
	if e.name == "" {
		return "TLS ClientHello names no server, not the CONNECT's host " + e.host
	}
	return "TLS server name " + e.name + " does not match the CONNECT's host " + e.host
}

func (e *serverNameError) Is(target error) bool { return target == errServerName }

func validIP(host string) bool {
	return net.ParseIP(host) != nil
}
