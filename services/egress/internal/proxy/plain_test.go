package proxy

import (
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"corral.dev/pkg/egressapi"
)

func TestPlainHTTP(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, nil, nil)
	var mu sync.Mutex
	var judged []Target
	j := judgeFunc(func(_ egressapi.Identity, tg Target) Verdict {
		mu.Lock()
		defer mu.Unlock()
		judged = append(judged, tg)
		return Verdict{Decision: Allow, Rule: "plain", Known: true}
	})
	cr := &creds{hosts: map[string]Injection{"plain.example.test": {Headers: map[string]string{"Authorization": "Bearer s3cret"}}}}
	rec := newRecorder()
	p := New(Config{CA: proxyCA(), Resolve: map[string]string{"plain.example.test": up.addr()}}, j, cr, nil, rec)
	sock := serve(t, p, testID)
	c := client(sock, newPKI(t).pool)

	req := newRequest(t, "POST", "http://Plain.Example.Test/x?y=1", strings.NewReader("body"))
	req.Header.Set("Authorization", "Bearer mine")
	req.Header.Set("Proxy-Connection", "keep-alive")
	resp, body := get(t, c, req)
	if resp.StatusCode != http.StatusOK || body != "hello POST /x" {
		t.Fatalf("got %d %q, want 200", resp.StatusCode, body)
	}
	r, got := up.last(t)
	if string(got) != "body" || r.URL.RawQuery != "y=1" || r.Header.Get("Authorization") != "Bearer mine" {
		t.Errorf("upstream got body %q query %q Authorization %q, want the request as sent", got, r.URL.RawQuery, r.Header.Get("Authorization"))
	}
	for _, h := range []string{"Proxy-Authorization", "Proxy-Connection"} {
		if v := r.Header.Get(h); v != "" {
			t.Errorf("upstream got %s: %q", h, v)
		}
	}
	if len(cr.asked) != 0 {
		t.Errorf("credentials asked for %v, want none over plain HTTP", cr.asked)
	}
	want := Target{Scheme: "http", Host: "plain.example.test", Port: 80, Method: "POST", Path: "/x"}
	mu.Lock()
	if len(judged) != 1 || judged[0] != want {
		t.Errorf("judged %+v, want %+v", judged, want)
	}
	mu.Unlock()
	if e := rec.next(t); e.Target != want || e.Status != 200 || e.Sent != 4 || e.Received != int64(len(body)) {
		t.Errorf("entry %+v, want %+v, status 200, 4 bytes sent and %d received", e, want, len(body))
	}

	// A request in origin form is not for a proxy.
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "GET / HTTP/1.1\r\nHost: plain.example.test\r\nConnection: close\r\n\r\n")
	if text := readAll(t, conn); !strings.HasPrefix(text, "HTTP/1.1 400 ") {
		t.Errorf("origin-form request: got %q, want 400", text)
	}
}

func TestPlainUpstreamDown(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	rec := newRecorder()
	p := New(Config{CA: proxyCA(), Resolve: map[string]string{"down.example.test": addr}}, allowAll, nil, nil, rec)
	resp, body := get(t, client(serve(t, p, testID), newPKI(t).pool), newRequest(t, "GET", "http://down.example.test/", nil))
	if resp.StatusCode != http.StatusBadGateway || !strings.HasPrefix(body, "corral egress: down.example.test:80: ") {
		t.Errorf("got %d %q, want 502", resp.StatusCode, body)
	}
	if e := rec.next(t); e.Status != 502 || e.Refused || e.Reason == "" {
		t.Errorf("entry %+v, want a 502 with a reason", e)
	}
}
