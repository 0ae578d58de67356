package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// tunnel connects a CONNECT to its host and splices bytes both ways,
// once the client's TLS ClientHello names that host. e is the CONNECT's
// entry, to be recorded when the tunnel ends.
func (s *session) tunnel(w http.ResponseWriter, r *http.Request, e Entry) {
	up, err := s.p.dialer.DialContext(r.Context(), "tcp", e.hostPort())
	if err != nil {
		if errors.Is(err, errInternal) {
			refuse(w, &e, "", err.Error())
		} else {
			fail(w, &e, http.StatusBadGateway, err.Error())
		}
		s.record(r.Context(), e)
		return
	}
	defer up.Close()
	c, br, err := s.hijack(w)
	if err != nil {
		s.p.log.DebugContext(r.Context(), "tunnel hijack failed", "host", e.Host, "err", err)
		return
	}
	defer func() {
		s.untrack(c)
		c.Close()
	}()
	defer func() { s.record(r.Context(), e) }()

	c.SetReadDeadline(time.Now().Add(helloTimeout))
	name, hello, err := peekServerName(br)
	c.SetReadDeadline(time.Time{})
	if err == nil {
		err = checkServerName(name, e.Host)
	}
	if err != nil {
		e.Status, e.Refused, e.Reason = http.StatusForbidden, true, err.Error()
		return
	}
	e.Sent, e.Received = splice(c, br, up, hello)
}

// peekServerName reads a TLS ClientHello from r and returns the server
// name it gives and every byte it read, which the upstream must get.
func peekServerName(r io.Reader) (string, []byte, error) {
	var read bytes.Buffer
	var name string
	var named bool
	err := tls.Server(readOnlyConn{r: io.TeeReader(r, &read)}, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			name, named = h.ServerName, true
			return nil, errPeeked
		},
	}).Handshake()
	if !named {
		return "", nil, fmt.Errorf("read TLS ClientHello: %w", err)
	}
	return name, read.Bytes(), nil
}

// errPeeked stops a handshake once the ClientHello has been read.
var errPeeked = errors.New("peeked")

// readOnlyConn is a connection a ClientHello is read from, and into which
// nothing is written.
type readOnlyConn struct {
	net.Conn // nil: only the methods below are called
	r        io.Reader
}

func (c readOnlyConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c readOnlyConn) Write(p []byte) (int, error)      { return 0, io.ErrClosedPipe }
func (c readOnlyConn) Close() error                     { return nil }
func (c readOnlyConn) SetDeadline(time.Time) error      { return nil }
func (c readOnlyConn) SetReadDeadline(time.Time) error  { return nil }
func (c readOnlyConn) SetWriteDeadline(time.Time) error { return nil }
func (c readOnlyConn) LocalAddr() net.Addr              { return &net.UnixAddr{} }
func (c readOnlyConn) RemoteAddr() net.Addr             { return &net.UnixAddr{} }

// drainTimeout is how long a tunnel waits for the client to close once
// the upstream has.
const drainTimeout = 30 * time.Second

// splice copies between the client c (read through br, after hello) and
// the upstream up until both are done, and returns how many bytes went
// each way. Where both are sockets, the kernel moves the bytes (splice).
func splice(c net.Conn, br *bufio.Reader, up net.Conn, hello []byte) (sent, received int64) {
	// A connection the listener wrapped (to count it, say) is copied as
	// the socket it wraps, which the kernel can splice; the caller still
	// closes the wrapper.
	if w, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = w.NetConn()
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		n, err := up.Write(hello)
		sent += int64(n)
		if err == nil && br.Buffered() > 0 {
			b, _ := br.Peek(br.Buffered())
			n, err = up.Write(b)
			sent += int64(n)
		}
		if err == nil {
			var m int64
			m, err = io.Copy(up, c) // c itself, not br: splices
			sent += m
		}
		halfClose(up, c, err)
	})
	received, err := io.Copy(c, up)
	halfClose(c, up, err)
	// The upstream is done: a client that keeps its side open is not
	// waited for long.
	c.SetReadDeadline(time.Now().Add(drainTimeout))
	wg.Wait()
	return sent, received
}

// halfClose ends a copy into dst from src: it closes dst for writing
// when the copy ended cleanly, and both when it failed.
func halfClose(dst, src net.Conn, err error) {
	if cw, ok := dst.(interface{ CloseWrite() error }); ok && err == nil {
		if cw.CloseWrite() == nil {
			return
		}
	}
	dst.Close()
	src.Close()
}
