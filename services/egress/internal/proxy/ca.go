package proxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"time"
)

// caValidity is how long a CA made by [NewCA] is valid.
const caValidity = 10 * 365 * 24 * time.Hour

// NewCA makes a certificate authority for intercepting TLS: a
// self-signed ECDSA P-256 certificate named commonName, valid for ten
// years, with its key. Leaf is set.
func NewCA(commonName string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("make ca key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"Corral"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("make ca certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("parse ca certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// LoadOrCreateCA loads the CA whose PEM certificate and key are in
// certFile and keyFile, or, when neither exists, makes one with [NewCA]
// and writes them there (the key readable by its owner only). It is an
// error for only one of them to exist.
func LoadOrCreateCA(certFile, keyFile string) (tls.Certificate, error) {
	_, certErr := os.Stat(certFile)
	_, keyErr := os.Stat(keyFile)
	switch {
	case certErr == nil && keyErr == nil:
		ca, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("load ca: %w", err)
		}
		if ca.Leaf == nil || !ca.Leaf.IsCA {
			return tls.Certificate{}, fmt.Errorf("load ca: %s is not a ca certificate", certFile)
		}
		return ca, nil
	case !errors.Is(certErr, fs.ErrNotExist) || !errors.Is(keyErr, fs.ErrNotExist):
		return tls.Certificate{}, fmt.Errorf("load ca: want both or neither of %s and %s: %w", certFile, keyFile, errors.Join(certErr, keyErr))
	}
	ca, err := NewCA("Corral egress CA")
	if err != nil {
		return tls.Certificate{}, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(ca.PrivateKey)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("encode ca key: %w", err)
	}
	if err := writePEM(keyFile, 0o600, "PRIVATE KEY", keyDER); err != nil {
		return tls.Certificate{}, err
	}
	if err := writePEM(certFile, 0o644, "CERTIFICATE", ca.Certificate[0]); err != nil {
		return tls.Certificate{}, err
	}
	return ca, nil
}

// writePEM creates name, which must not exist, holding one PEM block.
func writePEM(name string, perm os.FileMode, typ string, der []byte) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return fmt.Errorf("write ca: %w", err)
	}
	err = pem.Encode(f, &pem.Block{Type: typ, Bytes: der})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write ca %s: %w", name, err)
	}
	return nil
}

// serial returns a random positive certificate serial number of up to
// 128 bits.
func serial() *big.Int {
	b := make([]byte, 16)
	rand.Read(b) // never fails: see crypto/rand.Read
	return new(big.Int).Add(new(big.Int).SetBytes(b), big.NewInt(1))
}
