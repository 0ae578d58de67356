package upstreamtest_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"slices"
	"testing"

	"corral.dev/pkg/upstreamtest"
)

func TestStart(t *testing.T) {
	t.Parallel()
	ca := upstreamtest.NewCA(t)
	up := upstreamtest.Start(t, ca, "api.example.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello from "+r.Host)
	}))
	if got, want := up.URL, "https://api.example.test"; got != want {
		t.Errorf("URL = %q, want %q", got, want)
	}
	if got, want := up.DirectURL, "https://"+up.Addr; got != want {
		t.Errorf("DirectURL = %q, want %q", got, want)
	}

	// A client that resolves the host to Addr, as the proxy will.
	dialer := &net.Dialer{}
	client := &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: ca.Pool()},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == up.Host+":443" {
				addr = up.Addr
			}
			return dialer.DialContext(ctx, network, addr)
		},
	}}
	t.Cleanup(client.CloseIdleConnections)
	for _, tc := range []struct{ url, body string }{
		{up.URL + "/a", "hello from api.example.test"},
		{up.DirectURL + "/b", "hello from " + up.Addr},
	} {
		req, err := http.NewRequestWithContext(t.Context(), "GET", tc.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer t0ken")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", tc.url, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if string(body) != tc.body {
			t.Errorf("GET %s = %q, want %q", tc.url, body, tc.body)
		}
	}
	if got, want := up.Requests(), []string{"GET /a", "GET /b"}; !slices.Equal(got, want) {
		t.Errorf("Requests() = %q, want %q", got, want)
	}
	if got, want := up.Authorizations(), []string{"Bearer t0ken", "Bearer t0ken"}; !slices.Equal(got, want) {
		t.Errorf("Authorizations() = %q, want %q", got, want)
	}
}

func TestCA(t *testing.T) {
	t.Parallel()
	ca := upstreamtest.NewCA(t)
	block, _ := pem.Decode([]byte(readFile(t, ca.WriteFile(t, t.TempDir()))))
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("WriteFile wrote no PEM certificate")
	}
	root, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !root.IsCA {
		t.Errorf("CA certificate is not a CA")
	}
	leaf := ca.ServerTLS(t, "a.example.test", "b.example.test", "::1").Certificates[0].Leaf
	for _, name := range []string{"a.example.test", "b.example.test", "127.0.0.1", "::1"} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: ca.Pool()}); err != nil {
			t.Errorf("verify leaf for %s: %v", name, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "c.example.test", Roots: ca.Pool()}); err == nil {
		t.Errorf("leaf verified for c.example.test, which it does not name")
	}
	other := upstreamtest.NewCA(t)
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "a.example.test", Roots: other.Pool()}); err == nil {
		t.Errorf("leaf verified under another CA")
	}
}
