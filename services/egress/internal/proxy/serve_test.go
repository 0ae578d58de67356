package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// listenUnix listens on a new Unix socket and returns the listener and
// its path.
func listenUnix(t *testing.T) (net.Listener, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "px")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	return l, sock
}

// waitServe waits for Serve's result.
func waitServe(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
}

func TestServeEndsWithContext(t *testing.T) {
	t.Parallel()
	k := newPKI(t)
	up := startUpstream(t, k, nil, "git.example.test", "api.example.test")
	resolve := map[string]string{"git.example.test": up.addr(), "api.example.test": up.addr()}
	cr := &creds{hosts: map[string]Injection{"api.example.test": {}}}
	p := New(Config{CA: proxyCA(), RootCAs: k.pool, Resolve: resolve}, allowAll, cr, nil, nil)
	l, sock := listenUnix(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx, l, testID) }()

	pool := k.pool.Clone()
	pool.AddCert(proxyCA().Leaf)
	var conns []net.Conn
	for _, host := range []string{"git.example.test", "api.example.test"} { // a tunnel, an intercepted connection
		resp, c, _ := connect(t, sock, host+":443")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT %s: %s", host, resp.Status)
		}
		tc := tls.Client(c, &tls.Config{ServerName: host, RootCAs: pool})
		if err := tc.Handshake(); err != nil {
			t.Fatalf("%s: handshake: %v", host, err)
		}
		conns = append(conns, tc)
	}
	idle, err := net.Dial("unix", sock) // a connection that sent nothing
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	conns = append(conns, idle)

	cancel()
	waitServe(t, done)
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("connection %d: read returned %v, want it closed", i, err)
		}
	}
}

func TestServeDrainsWhenListenerCloses(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	arrived := make(chan struct{})
	up := startUpstream(t, nil, func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-release
		io.WriteString(w, "done")
	})
	p := New(Config{CA: proxyCA(), Resolve: map[string]string{"slow.example.test": up.addr()}}, allowAll, nil, nil, nil)
	l, sock := listenUnix(t)
	done := make(chan error, 1)
	go func() { done <- p.Serve(context.Background(), l, testID) }()

	c := client(sock, newPKI(t).pool)
	type result struct {
		body string
		err  error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := c.Get("http://slow.example.test/")
		if err != nil {
			got <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		got <- result{string(b), err}
	}()
	<-arrived
	l.Close()
	if _, err := net.Dial("unix", sock); err == nil {
		t.Error("dialled a closed listener")
	}
	close(release)
	if r := <-got; r.err != nil || r.body != "done" {
		t.Errorf("request in progress: got %q, %v, want it to finish", r.body, r.err)
	}
	waitServe(t, done)
}
