package proxy

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"corral.dev/pkg/egressapi"
)

// TestCurl drives the proxy with curl, as a sandboxed program would: the
// proxy named as in HTTPS_PROXY, the CA bundle the sandbox has.
func TestCurl(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl")
	}
	k := newPKI(t)
	up := startUpstream(t, k, nil, "git.example.test", "api.example.test", "evil.example.test")
	j := judgeFunc(func(_ egressapi.Identity, tg Target) Verdict {
		switch {
		case tg.Host == "evil.example.test":
			return Verdict{Decision: Deny, Rule: "no-evil", Reason: "evil is off limits", Known: true}
		case tg.Host == "api.example.test" && tg.Method == "DELETE":
			return Verdict{Decision: Deny, Rule: "api", Reason: "no deleting", Known: true}
		}
		return Verdict{Decision: Allow, Rule: "ok", Known: true}
	})
	cr := &creds{hosts: map[string]Injection{"api.example.test": {
		Headers: map[string]string{"Authorization": "Bearer s3cret"},
		Redact:  []string{"s3cret"},
	}}}
	resolve := map[string]string{}
	for _, h := range []string{"git.example.test", "api.example.test", "evil.example.test"} {
		resolve[h] = up.addr()
	}
	rec := newRecorder()
	p := New(Config{CA: proxyCA(), RootCAs: k.pool, Resolve: resolve}, j, cr, nil, rec)
	// curl cannot reach a proxy over a Unix socket; in a sandbox, it
	// reaches the executor's relay over TCP.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveOn(t, p, testID, l)
	bundle := writeCAs(t, t.TempDir(), k.ca, proxyCA())

	curl := func(args ...string) (string, string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		args = append([]string{"-sS", "--proxy", "http://" + l.Addr().String(), "--cacert", bundle}, args...)
		cmd := exec.CommandContext(ctx, "curl", args...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		return string(out), stderr.String(), err
	}

	t.Run("tunnel", func(t *testing.T) {
		out, stderr, err := curl("https://git.example.test/info/refs")
		if err != nil || out != "hello GET /info/refs" {
			t.Fatalf("got %q, %v (%s), want the upstream's answer", out, err, stderr)
		}
		if e := rec.next(t); e.Method != "CONNECT" || e.Host != "git.example.test" || e.Received == 0 {
			t.Errorf("entry %+v, want a tunnel", e)
		}
	})
	t.Run("intercept", func(t *testing.T) {
		out, stderr, err := curl("-H", "Authorization: Bearer mine", "https://api.example.test/v1/items")
		if err != nil || out != "hello GET /v1/items" {
			t.Fatalf("got %q, %v (%s), want the upstream's answer", out, err, stderr)
		}
		if r, _ := up.last(t); r.Header.Get("Authorization") != "Bearer s3cret" {
			t.Errorf("upstream got Authorization %q, want the injected one", r.Header.Get("Authorization"))
		}
		if e := rec.next(t); e.Method != "GET" || e.Path != "/v1/items" || e.Status != 200 {
			t.Errorf("entry %+v, want the GET", e)
		}
	})
	t.Run("refused CONNECT", func(t *testing.T) {
		_, stderr, err := curl("https://evil.example.test/")
		if err == nil || !strings.Contains(stderr, "403") {
			t.Errorf("got %v (%s), want curl to fail with the proxy's 403", err, stderr)
		}
		if e := rec.next(t); !e.Refused || e.Verdict.Rule != "no-evil" {
			t.Errorf("entry %+v, want the refusal", e)
		}
	})
	t.Run("refused upload", func(t *testing.T) {
		// curl asks for 100 Continue before a big body: the refusal
		// comes without it.
		file := filepath.Join(t.TempDir(), "upload")
		if err := os.WriteFile(file, make([]byte, 8<<20), 0o644); err != nil {
			t.Fatal(err)
		}
		out, stderr, err := curl("-X", "DELETE", "--data-binary", "@"+file, "https://api.example.test/v1/items")
		if want := "corral egress: refused by rule api: no deleting\n"; err != nil || out != want {
			t.Errorf("got %q, %v (%s), want %q", out, err, stderr, want)
		}
		if e := rec.next(t); !e.Refused || e.Method != "DELETE" {
			t.Errorf("entry %+v, want the refusal", e)
		}
	})
	t.Run("refused request", func(t *testing.T) {
		out, stderr, err := curl("-X", "DELETE", "https://api.example.test/v1/items/1")
		if want := "corral egress: refused by rule api: no deleting\n"; err != nil || out != want {
			t.Errorf("got %q, %v (%s), want %q", out, err, stderr, want)
		}
		if e := rec.next(t); !e.Refused || e.Method != "DELETE" {
			t.Errorf("entry %+v, want the refusal", e)
		}
	})
}
