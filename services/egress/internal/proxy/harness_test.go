package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/egressapi"
)

// testID is the identity tests serve sandboxes for.
var testID = egressapi.Identity{Tenant: "acme", User: "ada", Session: uuid.MustParse("01900000-0000-7000-8000-000000000001")}

// pki is a CA the test upstreams' certificates are signed with: the
// Internet's CAs, as far as the proxy knows.
type pki struct {
	ca   tls.Certificate
	pool *x509.CertPool
}

func newPKI(t testing.TB) *pki {
	t.Helper()
	ca, err := NewCA("test upstream CA")
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Leaf)
	return &pki{ca: ca, pool: pool}
}

// serverTLS is a server configuration with a certificate for each name.
func (k *pki) serverTLS(t testing.TB, names ...string) *tls.Config {
	t.Helper()
	l := newLeaves(k.ca)
	cfg := &tls.Config{}
	for _, n := range names {
		c, err := l.sign(n, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = append(cfg.Certificates, *c)
	}
	return cfg
}

// upstream is an HTTPS server on loopback that the proxy reaches by name
// through [Config.Resolve].
type upstream struct {
	*httptest.Server
	mu   sync.Mutex
	seen []*http.Request // with Body replaced by its bytes, in body
	body [][]byte
}

// startUpstream starts an upstream answering with h, or by default with
// "hello <method> <path>", and records what it receives.
func startUpstream(t testing.TB, k *pki, h http.HandlerFunc, names ...string) *upstream {
	t.Helper()
	u := &upstream{}
	if h == nil {
		h = func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello "+r.Method+" "+r.URL.Path) }
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("upstream read body: %v", err)
		}
		u.mu.Lock()
		u.seen = append(u.seen, r)
		u.body = append(u.body, body)
		u.mu.Unlock()
		h(w, r)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // handshakes the proxy refused
	if k != nil {
		srv.TLS = k.serverTLS(t, names...)
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	u.Server = srv
	return u
}

// last returns the last request the upstream got and its body.
func (u *upstream) last(t testing.TB) (*http.Request, []byte) {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.seen) == 0 {
		t.Fatal("upstream got no request")
	}
	return u.seen[len(u.seen)-1], u.body[len(u.body)-1]
}

func (u *upstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.seen)
}

// addr is the upstream's address, for [Config.Resolve].
func (u *upstream) addr() string { return u.Listener.Addr().String() }

// judgeFunc is a [Judge] in a function.
type judgeFunc func(id egressapi.Identity, t Target) Verdict

func (f judgeFunc) Judge(id egressapi.Identity, t Target) Verdict { return f(id, t) }

// allowAll allows every target by rule "all".
var allowAll = judgeFunc(func(egressapi.Identity, Target) Verdict {
	return Verdict{Decision: Allow, Rule: "all", Known: true}
})

// creds is a [Credentials] binding one injection to each of its hosts.
type creds struct {
	mu    sync.Mutex
	hosts map[string]Injection
	asked []string // the hosts For was asked about
}

func (c *creds) Bound(_ context.Context, _ egressapi.Identity, host string) (bool, error) {
	_, ok := c.hosts[host]
	return ok, nil
}

func (c *creds) For(_ context.Context, _ egressapi.Identity, host, path string) (Injection, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.asked = append(c.asked, host+path)
	return c.hosts[host], nil
}

// holder is a [Holder] that waits on one approval, passing once when
// approved is set.
type holder struct {
	mu       sync.Mutex
	approval uuid.UUID
	approved bool
	got      []Held
}

func (h *holder) Check(_ context.Context, _ egressapi.Identity, r Held) (bool, uuid.UUID, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.got = append(h.got, r)
	if h.approved {
		h.approved = false
		return true, h.approval, nil
	}
	return false, h.approval, nil
}

func (h *holder) approve() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.approved = true
}

func (h *holder) last(t testing.TB) Held {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.got) == 0 {
		t.Fatal("holder was not asked")
	}
	return h.got[len(h.got)-1]
}

// recorder is a [Recorder] whose entries a test takes one by one.
type recorder struct {
	entries chan Entry
	ids     chan egressapi.Identity
}

func newRecorder() *recorder {
	return &recorder{entries: make(chan Entry, 1000), ids: make(chan egressapi.Identity, 1000)}
}

func (r *recorder) Record(id egressapi.Identity, e Entry) {
	r.ids <- id
	r.entries <- e
}

// next returns the next entry recorded, waiting for it a while.
func (r *recorder) next(t testing.TB) Entry {
	t.Helper()
	select {
	case e := <-r.entries:
		<-r.ids
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no entry recorded")
		return Entry{}
	}
}

// serve serves p on a new Unix socket for id until the test ends, and
// returns the socket's path.
func serve(t testing.TB, p *Proxy, id egressapi.Identity) string {
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
	serveOn(t, p, id, l)
	return sock
}

// serveOn serves p on l for id until the test ends.
func serveOn(t testing.TB, p *Proxy, id egressapi.Identity, l net.Listener) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx, l, id) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
}

// proxyCA is the proxy's CA in tests, made once.
var proxyCA = sync.OnceValue(func() tls.Certificate {
	ca, err := NewCA("test egress CA")
	if err != nil {
		panic(err)
	}
	return ca
})

// client is an HTTP client whose proxy is at sock, trusting the proxy's
// CA and roots. It opens a new connection per request, as a new git or
// curl process does.
func client(sock string, roots *x509.CertPool) *http.Client {
	pool := roots.Clone()
	pool.AddCert(proxyCA().Leaf)
	return &http.Client{
		Transport: &http.Transport{
			Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "egress.invalid:3128", User: url.UserPassword("sandbox", "pw")}),
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", sock)
			},
			TLSClientConfig:   &tls.Config{RootCAs: pool},
			DisableKeepAlives: true,
		},
		Timeout: 30 * time.Second,
	}
}

// get fetches url and returns the response with its body read.
func get(t testing.TB, c *http.Client, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", req.Method, req.URL, err)
	}
	return resp, string(body)
}

func newRequest(t testing.TB, method, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// connect sends a CONNECT for authority to the proxy at sock and returns
// the answer and the connection, which the test closes.
func connect(t testing.TB, sock, authority string) (*http.Response, net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, "CONNECT "+authority+" HTTP/1.1\r\nHost: "+authority+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", authority, err)
	}
	return resp, c, br
}

// readAll reads r whole, failing the test on an error.
func readAll(t testing.TB, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	return string(b)
}

// writeCAs writes the certificates of the CAs to a PEM bundle in dir, as
// the sandbox's ca.pem, and returns its path.
func writeCAs(t testing.TB, dir string, cas ...tls.Certificate) string {
	t.Helper()
	var b strings.Builder
	for _, ca := range cas {
		pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: ca.Certificate[0]})
	}
	name := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(name, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return name
}
