package proxy

import (
	"compress/gzip"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"testing"

	"corral.dev/pkg/egressapi"
)

// interceptEnv is a proxy with a credential bound to git.example.test,
// whose upstream answers with h.
type interceptEnv struct {
	up    *upstream
	creds *creds
	rec   *recorder
	c     *http.Client
}

func newInterceptEnv(t *testing.T, j Judge, inj Injection, h http.HandlerFunc) *interceptEnv {
	t.Helper()
	k := newPKI(t)
	e := &interceptEnv{
		up:    startUpstream(t, k, h, "git.example.test"),
		creds: &creds{hosts: map[string]Injection{"git.example.test": inj}},
		rec:   newRecorder(),
	}
	p := New(Config{CA: proxyCA(), RootCAs: k.pool, Resolve: map[string]string{"git.example.test": e.up.addr()}},
		j, e.creds, nil, e.rec)
	e.c = client(serve(t, p, testID), k.pool)
	return e
}

func TestInterceptInjectsHeader(t *testing.T) {
	t.Parallel()
	env := newInterceptEnv(t, allowAll, Injection{
		Headers: map[string]string{"Authorization": "Bearer s3cret", "X-Api-Key": "k3y"},
		Redact:  []string{"s3cret", "k3y"},
	}, nil)
	req := newRequest(t, "GET", "https://git.example.test/org/repo?x=1", nil)
	req.Header.Set("Authorization", "Bearer the-sandbox-own")
	req.Header.Add("x-api-key", "other")
	req.Host = "evil.example.test" // the CONNECT's host wins
	resp, body := get(t, env.c, req)
	if resp.StatusCode != http.StatusOK || body != "hello GET /org/repo" {
		t.Fatalf("got %d %q, want 200", resp.StatusCode, body)
	}
	if got := resp.TLS.PeerCertificates[0].Issuer.CommonName; got != "test egress CA" {
		t.Errorf("certificate issued by %q, want the proxy's CA", got)
	}
	if got := resp.TLS.NegotiatedProtocol; got != "" && got != "http/1.1" {
		t.Errorf("negotiated %q, want HTTP/1.1", got)
	}
	r, _ := env.up.last(t)
	if got := r.Header.Values("Authorization"); len(got) != 1 || got[0] != "Bearer s3cret" {
		t.Errorf("upstream got Authorization %q, want the injected one only", got)
	}
	if got := r.Header.Values("X-Api-Key"); len(got) != 1 || got[0] != "k3y" {
		t.Errorf("upstream got X-Api-Key %q, want the injected one only", got)
	}
	if r.Host != "git.example.test" || r.URL.RawQuery != "x=1" {
		t.Errorf("upstream got Host %q query %q, want git.example.test x=1", r.Host, r.URL.RawQuery)
	}
	e := env.rec.next(t)
	want := Target{Scheme: "https", Host: "git.example.test", Port: 443, Method: "GET", Path: "/org/repo"}
	if e.Target != want || e.Status != 200 || e.Refused || e.Received != int64(len(body)) {
		t.Errorf("entry %+v, want %+v with status 200 and %d bytes", e, want, len(body))
	}
}

func TestInterceptBasicAuth(t *testing.T) {
	t.Parallel()
	token := "ghp_t0ken"
	basic := base64.StdEncoding.EncodeToString([]byte("x-access-token:" + token))
	env := newInterceptEnv(t, allowAll, Injection{
		Headers: map[string]string{"Authorization": "Basic " + basic},
		Redact:  []string{token, basic},
	}, nil)
	req := newRequest(t, "GET", "https://git.example.test/org/repo.git/info/refs?service=git-upload-pack", nil)
	req.SetBasicAuth("sandbox", "guess")
	if resp, _ := get(t, env.c, req); resp.StatusCode != http.StatusOK {
		t.Fatalf("got %s", resp.Status)
	}
	r, _ := env.up.last(t)
	if user, pass, ok := r.BasicAuth(); !ok || user != "x-access-token" || pass != token {
		t.Errorf("upstream got basic auth %q %q %v, want the injected token", user, pass, ok)
	}
}

func TestInterceptRedacts(t *testing.T) {
	t.Parallel()
	secret := "s3cret-token-0123456789"
	encoded := base64.StdEncoding.EncodeToString([]byte(secret))
	// The upstream echoes what it got, a byte per write, so that the
	// secret reaches the proxy split across reads.
	echo := func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		w.Header().Set("X-Echo", "you sent "+auth)
		if r.URL.Path == "/fixed" {
			w.Header().Set("Content-Length", "200") // a lie once redacted
		} else {
			w.Header().Set("Trailer", "X-Trailer")
		}
		text := "token=" + auth + " encoded=" + encoded + " end"
		text += strings.Repeat(".", 200-len(text))
		for i := range len(text) {
			io.WriteString(w, text[i:i+1])
			w.(http.Flusher).Flush()
		}
		w.Header().Set("X-Trailer", secret)
	}
	env := newInterceptEnv(t, allowAll, Injection{
		Headers: map[string]string{"Authorization": "Bearer " + secret},
		Redact:  []string{secret, encoded},
	}, echo)
	for _, path := range []string{"/chunked", "/fixed"} {
		resp, body := get(t, env.c, newRequest(t, "GET", "https://git.example.test"+path, nil))
		want := "token=Bearer [REDACTED] encoded=[REDACTED] end"
		if !strings.HasPrefix(body, want) || strings.Contains(body, secret) {
			t.Errorf("%s: body %q, want it to start %q", path, body, want)
		}
		if got := resp.Header.Get("X-Echo"); got != "you sent Bearer [REDACTED]" {
			t.Errorf("%s: header X-Echo %q, want the secret redacted", path, got)
		}
		if resp.ContentLength != -1 && resp.ContentLength != int64(len(body)) {
			t.Errorf("%s: Content-Length %d, want none or the redacted body's %d", path, resp.ContentLength, len(body))
		}
		if got := resp.Trailer.Get("X-Trailer"); path == "/chunked" && got != Redacted {
			t.Errorf("%s: trailer %q, want %q", path, got, Redacted)
		}
		if e := env.rec.next(t); e.Received != int64(len(body)) {
			t.Errorf("%s: entry says %d bytes received, want %d", path, e.Received, len(body))
		}
	}
}

func TestInterceptPerPath(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var judged []Target
	j := judgeFunc(func(_ egressapi.Identity, tg Target) Verdict {
		mu.Lock()
		judged = append(judged, tg)
		mu.Unlock()
		switch tg.Method {
		case "":
			return Verdict{} // depends on the method
		case "GET":
			return Verdict{Decision: Allow, Rule: "read", Known: true}
		}
		return Verdict{Decision: Deny, Rule: "read", Reason: "read-only", Known: true}
	})
	k := newPKI(t)
	up := startUpstream(t, k, nil, "api.example.test")
	rec := newRecorder()
	p := New(Config{CA: proxyCA(), RootCAs: k.pool, Resolve: map[string]string{"api.example.test": up.addr()}}, j, nil, nil, rec)
	c := client(serve(t, p, testID), k.pool)

	if resp, body := get(t, c, newRequest(t, "GET", "https://api.example.test/items", nil)); resp.StatusCode != 200 || body != "hello GET /items" {
		t.Errorf("GET: got %d %q, want 200", resp.StatusCode, body)
	}
	if e := rec.next(t); e.Refused || e.Method != "GET" || e.Verdict.Rule != "read" {
		t.Errorf("GET: entry %+v", e)
	}
	resp, body := get(t, c, newRequest(t, "POST", "https://api.example.test/items", strings.NewReader("{}")))
	if want := "corral egress: refused by rule read: read-only\n"; resp.StatusCode != 403 || body != want {
		t.Errorf("POST: got %d %q, want 403 %q", resp.StatusCode, body, want)
	}
	if e := rec.next(t); !e.Refused || e.Method != "POST" || e.Path != "/items" || e.Reason != "read-only" {
		t.Errorf("POST: entry %+v", e)
	}
	if n := up.count(); n != 1 {
		t.Errorf("upstream got %d requests, want the GET only", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(judged) != 4 || judged[0].Method != "" || judged[1].Method != "GET" {
		t.Errorf("judged %+v, want CONNECT, GET, CONNECT, POST", judged)
	}
}

func TestInterceptRefusesDotSegments(t *testing.T) {
	t.Parallel()
	env := newInterceptEnv(t, allowAll, Injection{}, nil)
	req := newRequest(t, "GET", "https://git.example.test/org/repo/", nil)
	req.URL.Opaque = "/org/repo/%2e%2e/other" // sent as is
	resp, body := get(t, env.c, req)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "dot segments") {
		t.Errorf("got %d %q, want 403", resp.StatusCode, body)
	}
}

func TestIdentityFromServe(t *testing.T) {
	t.Parallel()
	k := newPKI(t)
	up := startUpstream(t, k, nil, "git.example.test")
	var mu sync.Mutex
	var ids []egressapi.Identity
	j := judgeFunc(func(id egressapi.Identity, tg Target) Verdict {
		mu.Lock()
		ids = append(ids, id)
		mu.Unlock()
		return Verdict{Decision: Allow, Known: tg.Method != ""}
	})
	p := New(Config{CA: proxyCA(), RootCAs: k.pool, Resolve: map[string]string{"git.example.test": up.addr()}}, j, nil, nil, nil)
	other := egressapi.Identity{Tenant: "globex", User: "bob", Session: testID.Session}
	for _, id := range []egressapi.Identity{testID, other} {
		c := client(serve(t, p, id), k.pool)
		c.Transport.(*http.Transport).ProxyConnectHeader = http.Header{"X-Corral-Tenant": {"evil"}}
		req := newRequest(t, "GET", "https://git.example.test/", nil)
		req.Header.Set("X-Corral-Tenant", "evil")
		req.Header.Set("X-Corral-Session", "00000000-0000-0000-0000-000000000000")
		if resp, _ := get(t, c, req); resp.StatusCode != 200 {
			t.Fatalf("got %s", resp.Status)
		}
		r, _ := up.last(t)
		for k := range r.Header {
			if strings.HasPrefix(k, "X-Corral-") {
				t.Errorf("upstream got header %s", k)
			}
		}
		mu.Lock()
		if len(ids) != 2 || !ids[0].Equal(id) || !ids[1].Equal(id) {
			t.Errorf("judged for %+v, want %+v twice (CONNECT and GET)", ids, id)
		}
		ids = nil
		mu.Unlock()
	}
}

func TestInterceptKeepAlive(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	connects := 0
	j := judgeFunc(func(_ egressapi.Identity, tg Target) Verdict {
		if tg.Method == "" {
			mu.Lock()
			connects++
			mu.Unlock()
			return Verdict{}
		}
		if tg.Method == "DELETE" {
			return Verdict{Decision: Deny, Rule: "no-delete", Known: true}
		}
		return Verdict{Decision: Allow, Known: true}
	})
	env := newInterceptEnv(t, j, Injection{Headers: map[string]string{"Authorization": "Bearer s3cret"}, Redact: []string{"s3cret"}}, nil)
	env.c.Transport.(*http.Transport).DisableKeepAlives = false
	for i, method := range []string{"GET", "DELETE", "POST", "GET"} {
		resp, body := get(t, env.c, newRequest(t, method, "https://git.example.test/x", strings.NewReader("body")))
		want := 200
		if method == "DELETE" {
			want = 403
		}
		if resp.StatusCode != want {
			t.Errorf("request %d, %s: got %d %q, want %d", i, method, resp.StatusCode, body, want)
		}
	}
	if n := env.up.count(); n != 3 {
		t.Errorf("upstream got %d requests, want 3", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if connects != 1 {
		t.Errorf("%d CONNECTs, want one connection kept alive", connects)
	}
}

func TestInterceptRedactsEncoded(t *testing.T) {
	t.Parallel()
	secret := "s3cret-token-0123456789"
	// An upstream that encodes its answer whatever it is asked.
	h := func(w http.ResponseWriter, r *http.Request) {
		if got := r.Header.Get("Accept-Encoding"); got != "identity" {
			t.Errorf("upstream asked for encoding %q, want identity", got)
		}
		if r.URL.Path == "/br" {
			w.Header().Set("Content-Encoding", "br")
			io.WriteString(w, "not really brotli")
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		io.WriteString(zw, "you sent "+r.Header.Get("Authorization"))
		zw.Close()
	}
	env := newInterceptEnv(t, allowAll, Injection{
		Headers: map[string]string{"Authorization": "Bearer " + secret},
		Redact:  []string{secret},
	}, h)
	req := newRequest(t, "GET", "https://git.example.test/gzip", nil)
	req.Header.Set("Accept-Encoding", "gzip") // and the client does its own decoding
	resp, body := get(t, env.c, req)
	if resp.StatusCode != 200 || body != "you sent Bearer [REDACTED]" || resp.Header.Get("Content-Encoding") != "" {
		t.Errorf("gzip: got %d %q (encoding %q), want the body plain and redacted", resp.StatusCode, body, resp.Header.Get("Content-Encoding"))
	}
	env.rec.next(t)
	resp, body = get(t, env.c, newRequest(t, "GET", "https://git.example.test/br", nil))
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, `cannot redact a body of content encoding "br"`) {
		t.Errorf("br: got %d %q, want 502", resp.StatusCode, body)
	}
}

// Paths and methods a server may read otherwise than the policy are
// refused before the policy sees them.
func TestInterceptRefusesAmbiguousRequests(t *testing.T) {
	t.Parallel()
	env := newInterceptEnv(t, allowAll, Injection{}, nil)
	for _, tc := range []struct{ method, opaque string }{
		{"GET", "/org/repo/..;/admin"},
		{"GET", "/org/repo/%252e%252e/admin"},
		{"post", "/org/repo.git/git-receive-pack"},
	} {
		req := newRequest(t, tc.method, "https://git.example.test/org/repo/", nil)
		req.URL.Opaque = tc.opaque
		if resp, body := get(t, env.c, req); resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s %s: got %d %q, want 403", tc.method, tc.opaque, resp.StatusCode, body)
		}
	}
	if n := env.up.count(); n != 0 {
		t.Errorf("the upstream received %d requests", n)
	}
}

// An intercepted request switches to no other protocol (websocket, h2c),
// whose requests nobody would judge; an interim response, whose headers
// come from the upstream before any redaction, never reaches the client.
func TestInterceptNoUpgradeNoInterimResponse(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-token"
	env := newInterceptEnv(t, allowAll, Injection{Headers: map[string]string{"Authorization": "Bearer " + secret}, Redact: []string{secret}},
		func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Echo", r.Header.Get("Authorization"))
			w.Header().Set("X-Upgrade-Seen", r.Header.Get("Upgrade"))
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("X-Echo")
			fmt.Fprint(w, "done")
		})
	var interim []string
	req := newRequest(t, "GET", "https://git.example.test/x", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "h2c")
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			interim = append(interim, fmt.Sprint(code, h))
			return nil
		},
	}))
	resp, body := get(t, env.c, req)
	if resp.StatusCode != 200 || body != "done" || resp.Header.Get("X-Upgrade-Seen") != "" {
		t.Errorf("got %d %q, upstream saw Upgrade %q; want 200 and no upgrade", resp.StatusCode, body, resp.Header.Get("X-Upgrade-Seen"))
	}
	if len(interim) != 0 {
		t.Errorf("the client got interim responses: %q", interim)
	}
}
