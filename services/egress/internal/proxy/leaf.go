package proxy

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// Leaf certificates are valid for leafValidity (at most until the CA
// expires) and made again when less than leafRenew remains. At most
// maxLeaves are kept.
const (
	leafValidity = 7 * 24 * time.Hour
	leafRenew    = 24 * time.Hour
	maxLeaves    = 4096
)

// leaves makes and keeps the leaf certificates the proxy presents to
// clients whose TLS it terminates, one per host.
type leaves struct {
	ca  *x509.Certificate
	key crypto.Signer
	err error // why the CA cannot sign, if it cannot

	mu    sync.Mutex
	cache map[string]*tls.Certificate
}

func newLeaves(ca tls.Certificate) *leaves {
	l := &leaves{ca: ca.Leaf, cache: make(map[string]*tls.Certificate)}
	if l.ca == nil && len(ca.Certificate) > 0 {
		l.ca, l.err = x509.ParseCertificate(ca.Certificate[0])
	}
	key, ok := ca.PrivateKey.(crypto.Signer)
	switch {
	case l.err != nil:
	case l.ca == nil || !ok:
		l.err = errors.New("no ca certificate and key")
	case !l.ca.IsCA:
		l.err = errors.New("ca certificate is not a ca's")
	}
	l.key = key
	return l
}

// get returns a certificate for host (a DNS name or an IP address) signed
// by the CA.
func (l *leaves) get(host string) (*tls.Certificate, error) {
	if l.err != nil {
		return nil, fmt.Errorf("sign certificate for %s: %w", host, l.err)
	}
	now := time.Now()
	l.mu.Lock()
	c, ok := l.cache[host]
	l.mu.Unlock()
	if ok && now.Add(leafRenew).Before(c.Leaf.NotAfter) {
		return c, nil
	}
	// Signed outside the lock: a sandbox naming many hosts slows down
	// only its own handshakes. Two signing for one host at once both
	// get a good certificate; the cache keeps one.
	c, err := l.sign(host, now)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.cache) >= maxLeaves {
		for h := range l.cache { // drop any one
			delete(l.cache, h)
			break
		}
	}
	l.cache[host] = c
	return c, nil
}

// sign makes a new certificate for host, valid from now.
func (l *leaves) sign(host string, now time.Time) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("make key for %s: %w", host, err)
	}
	notAfter := now.Add(leafValidity)
	if l.ca.NotAfter.Before(notAfter) {
		notAfter = l.ca.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, l.ca, &key.PublicKey, l.key)
	if err != nil {
		return nil, fmt.Errorf("sign certificate for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse certificate for %s: %w", host, err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}
