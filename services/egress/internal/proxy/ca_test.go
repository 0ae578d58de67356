package proxy

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestLoadOrCreateCA(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca.key")
	ca, err := LoadOrCreateCA(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if !ca.Leaf.IsCA || ca.Leaf.NotAfter.Before(time.Now().Add(9*365*24*time.Hour)) {
		t.Errorf("made %+v, want a CA valid for ten years", ca.Leaf)
	}
	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v, %v, want mode 0600", fi.Mode(), err)
	}
	again, err := LoadOrCreateCA(certFile, keyFile)
	if err != nil || !bytes.Equal(again.Certificate[0], ca.Certificate[0]) || again.Leaf == nil {
		t.Errorf("loaded again: %v, want the same CA", err)
	}

	os.Remove(keyFile)
	if _, err := LoadOrCreateCA(certFile, keyFile); err == nil {
		t.Error("loaded a CA without its key")
	}
}

func TestLeaves(t *testing.T) {
	t.Parallel()
	ca, err := NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	l := newLeaves(ca)
	roots := x509.NewCertPool()
	roots.AddCert(ca.Leaf)
	for _, host := range []string{"git.example.test", "192.0.2.1", "2001:db8::1"} {
		c, err := l.get(host)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: roots}); err != nil {
			t.Errorf("%s: %v", host, err)
		}
		if again, _ := l.get(host); again != c {
			t.Errorf("%s: signed again, want the cached certificate", host)
		}
	}
	if _, err := newLeaves(tls.Certificate{Certificate: ca.Certificate}).get("x"); err == nil {
		t.Error("signed without a CA key")
	}
}
