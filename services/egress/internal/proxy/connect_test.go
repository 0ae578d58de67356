package proxy

import (
	"crypto/tls"
	"net/http"
	"strings"
	"testing"

	"corral.dev/pkg/egressapi"
)

func TestTunnel(t *testing.T) {
	t.Parallel()
	k := newPKI(t)
	up := startUpstream(t, k, nil, "git.example.test")
	rec := newRecorder()
	var judged []Target
	j := judgeFunc(func(_ egressapi.Identity, tg Target) Verdict {
		judged = append(judged, tg) // one CONNECT: no concurrent calls
		return Verdict{Decision: Allow, Rule: "git", Known: true}
	})
	p := New(Config{CA: proxyCA(), RootCAs: k.pool, Resolve: map[string]string{"git.example.test": up.addr()}},
		j, &creds{}, nil, rec)
	c := client(serve(t, p, testID), k.pool)

	resp, body := get(t, c, newRequest(t, "GET", "https://git.example.test/info/refs", nil))
	if resp.StatusCode != http.StatusOK || body != "hello GET /info/refs" {
		t.Fatalf("got %d %q, want 200 %q", resp.StatusCode, body, "hello GET /info/refs")
	}
	if got := resp.TLS.PeerCertificates[0].Issuer.CommonName; got != "test upstream CA" {
		t.Errorf("certificate issued by %q, want the upstream's CA: a tunnel does not terminate TLS", got)
	}
	want := Target{Scheme: "https", Host: "git.example.test", Port: 443}
	if len(judged) != 1 || judged[0] != want {
		t.Errorf("judged %+v, want one %+v", judged, want)
	}
	e := rec.next(t)
	if e.Method != "CONNECT" || e.Host != "git.example.test" || e.Port != 443 || e.Status != 0 || e.Refused ||
		e.Verdict.Rule != "git" || e.Sent < 100 || e.Received < 100 {
		t.Errorf("entry %+v, want an allowed CONNECT with bytes both ways", e)
	}
}

func TestConnectDenied(t *testing.T) {
	t.Parallel()
	j := judgeFunc(func(_ egressapi.Identity, tg Target) Verdict {
		if tg.Host == "evil.example.test" {
			return Verdict{Decision: Deny, Rule: "no-evil", Reason: "evil is off limits", Known: true}
		}
		return Verdict{Decision: Deny, Known: true}
	})
	rec := newRecorder()
	sock := serve(t, New(Config{CA: proxyCA()}, j, nil, nil, rec), testID)
	for _, tc := range []struct {
		authority, rule, body, reason string
	}{
		{"evil.example.test:443", "no-evil", "corral egress: refused by rule no-evil: evil is off limits\n", "evil is off limits"},
		{"Other.Example.Test.:8443", "", "corral egress: refused: no egress rule allows other.example.test:8443\n", "no egress rule allows other.example.test:8443"},
	} {
		resp, _, _ := connect(t, sock, tc.authority)
		body := readAll(t, resp.Body)
		if resp.StatusCode != http.StatusForbidden || body != tc.body {
			t.Errorf("CONNECT %s: got %d %q, want 403 %q", tc.authority, resp.StatusCode, body, tc.body)
		}
		if got := resp.Header.Get(RuleHeader); got != tc.rule {
			t.Errorf("CONNECT %s: rule header %q, want %q", tc.authority, got, tc.rule)
		}
		if got := resp.Header.Get(ReasonHeader); got != tc.reason {
			t.Errorf("CONNECT %s: reason header %q, want %q", tc.authority, got, tc.reason)
		}
		e := rec.next(t)
		if !e.Refused || e.Status != 403 || e.Method != "CONNECT" || e.Reason != tc.reason || e.Verdict.Rule != tc.rule {
			t.Errorf("CONNECT %s: entry %+v", tc.authority, e)
		}
	}
}

func TestServerNameMismatch(t *testing.T) {
	t.Parallel()
	k := newPKI(t)
	up := startUpstream(t, k, nil, "git.example.test", "other.example.test")
	resolve := map[string]string{"git.example.test": up.addr()}
	for _, tc := range []struct {
		name  string
		creds *creds // a bound credential makes the CONNECT intercepted
	}{
		{"tunnel", &creds{}},
		{"intercept", &creds{hosts: map[string]Injection{"git.example.test": {Headers: map[string]string{"Authorization": "Bearer x"}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := newRecorder()
			sock := serve(t, New(Config{CA: proxyCA(), RootCAs: k.pool, Resolve: resolve}, allowAll, tc.creds, nil, rec), testID)
			for _, sni := range []string{"other.example.test", ""} {
				resp, c, _ := connect(t, sock, "git.example.test:443")
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("CONNECT: %s", resp.Status)
				}
				pool := k.pool.Clone()
				pool.AddCert(proxyCA().Leaf)
				tc := tls.Client(c, &tls.Config{ServerName: sni, RootCAs: pool, InsecureSkipVerify: sni == ""})
				if err := tc.Handshake(); err == nil {
					t.Errorf("server name %q: handshake succeeded, want the connection refused", sni)
				}
				e := rec.next(t)
				if !e.Refused || e.Method != "CONNECT" || !strings.Contains(e.Reason, "CONNECT's host git.example.test") {
					t.Errorf("server name %q: entry %+v, want a refusal naming the host", sni, e)
				}
			}
			if n := up.count(); n != 0 {
				t.Errorf("upstream got %d requests, want none", n)
			}
		})
	}
}

func TestInternalAddressRefused(t *testing.T) {
	t.Parallel()
	plain := startUpstream(t, nil, nil) // on 127.0.0.1
	rec := newRecorder()
	sock := serve(t, New(Config{CA: proxyCA()}, allowAll, nil, nil, rec), testID)

	for _, authority := range []string{"localhost:443", "127.0.0.1:443", "[::1]:443", "10.1.2.3:443", "169.254.169.254:443"} {
		resp, _, _ := connect(t, sock, authority)
		body := readAll(t, resp.Body)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "never reaches internal addresses") {
			t.Errorf("CONNECT %s: got %d %q, want 403 for an internal address", authority, resp.StatusCode, body)
		}
		if e := rec.next(t); !e.Refused || e.Verdict.Rule != "all" {
			t.Errorf("CONNECT %s: entry %+v, want a refusal", authority, e)
		}
	}

	c := client(sock, newPKI(t).pool)
	resp, body := get(t, c, newRequest(t, "GET", plain.URL+"/metadata", nil))
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "never reaches internal addresses") {
		t.Errorf("GET %s: got %d %q, want 403", plain.URL, resp.StatusCode, body)
	}
	if e := rec.next(t); !e.Refused || e.Method != "GET" || e.Path != "/metadata" {
		t.Errorf("GET: entry %+v, want a refusal", e)
	}
	if n := plain.count(); n != 0 {
		t.Errorf("upstream got %d requests, want none", n)
	}

	// Unless allowed.
	sock = serve(t, New(Config{CA: proxyCA(), AllowPrivate: true}, allowAll, nil, nil, nil), testID)
	resp, body = get(t, client(sock, newPKI(t).pool), newRequest(t, "GET", plain.URL+"/metadata", nil))
	if resp.StatusCode != http.StatusOK || body != "hello GET /metadata" {
		t.Errorf("GET %s with AllowPrivate: got %d %q, want 200", plain.URL, resp.StatusCode, body)
	}
}
