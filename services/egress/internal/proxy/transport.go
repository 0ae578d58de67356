package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"time"
)

// copyBufSize is the size of the buffers bodies are copied through.
const copyBufSize = 64 << 10

// flushInterval is how long a response body of known length may wait in
// buffers before it is sent to the client; a body of unknown length (a
// stream) is sent as it comes.
const flushInterval = 20 * time.Millisecond

// newTransport makes the transport requests go upstream with: dialled by
// d, TLS verified against roots (nil for the system's), HTTP/1.1, bodies
// passed as they come (no transparent gzip) and connections kept for
// reuse by any sandbox, since a connection carries no credential.
func newTransport(d *dialer, roots *x509.CertPool) *http.Transport {
	return &http.Transport{
		DialContext:           d.DialContext,
		TLSClientConfig:       &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12, ClientSessionCache: tls.NewLRUClientSessionCache(256)},
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true,
		WriteBufferSize:       copyBufSize,
		ReadBufferSize:        copyBufSize,
	}
}

// bufferPool keeps the buffers of [httputil.ReverseProxy] copies.
type bufferPool struct{ bufs chan []byte }

func newBufferPool() *bufferPool {
	return &bufferPool{bufs: make(chan []byte, 64)}
}

func (p *bufferPool) Get() []byte {
	select {
	case b := <-p.bufs:
		return b
	default:
		return make([]byte, copyBufSize)
	}
}

func (p *bufferPool) Put(b []byte) {
	select {
	case p.bufs <- b:
	default:
	}
}
