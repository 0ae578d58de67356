package proxy

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"
)

// downloadSize is the body of the download benchmarks.
const downloadSize = 100 << 20

// benchUpstream answers /small with a few bytes and /big with
// downloadSize bytes.
func benchUpstream(b *testing.B, k *pki) *upstream {
	chunk := make([]byte, 1<<20)
	return startUpstream(b, k, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/big" {
			io.WriteString(w, "ok")
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(downloadSize))
		for range downloadSize / len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}, "bench.example.test")
}

// benchClient returns a client of the upstream in mode: "direct", or
// through the proxy on a Unix socket, "tunnel" or "intercept" (with a
// credential injected, and its secret redacted).
func benchClient(b *testing.B, mode string) *http.Client {
	k := newPKI(b)
	up := benchUpstream(b, k)
	if mode == "direct" {
		return &http.Client{Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "tcp", up.addr())
			},
			TLSClientConfig:   &tls.Config{RootCAs: k.pool},
			DisableKeepAlives: true,
		}}
	}
	cr := &creds{}
	if mode == "intercept" {
		cr.hosts = map[string]Injection{"bench.example.test": {
			Headers: map[string]string{"Authorization": "Bearer s3cret-0123456789"},
			Redact:  []string{"s3cret-0123456789"},
		}}
	}
	p := New(Config{CA: proxyCA(), RootCAs: k.pool, Resolve: map[string]string{"bench.example.test": up.addr()}},
		allowAll, cr, nil, nil)
	return client(serve(b, p, testID), k.pool)
}

// fetch gets url on a new connection and reads the body whole.
func fetch(b *testing.B, c *http.Client, url string) {
	resp, err := c.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("GET %s: %s, %v", url, resp.Status, err)
	}
}

// benchLatency times one small GET per iteration, each on a new
// connection (as each curl or git run makes), and reports the median
// and 99th percentile.
func benchLatency(b *testing.B, mode string) {
	c := benchClient(b, mode)
	fetch(b, c, "https://bench.example.test/small") // warm up: the leaf certificate, the upstream connection
	var took []time.Duration
	for b.Loop() {
		start := time.Now()
		fetch(b, c, "https://bench.example.test/small")
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2])/1e6, "p50-ms")
	b.ReportMetric(float64(took[len(took)*99/100])/1e6, "p99-ms")
}

func BenchmarkDirect(b *testing.B)    { benchLatency(b, "direct") }
func BenchmarkTunnel(b *testing.B)    { benchLatency(b, "tunnel") }
func BenchmarkIntercept(b *testing.B) { benchLatency(b, "intercept") }

// benchDownload fetches downloadSize bytes per iteration.
func benchDownload(b *testing.B, mode string) {
	c := benchClient(b, mode)
	b.SetBytes(downloadSize)
	for b.Loop() {
		fetch(b, c, "https://bench.example.test/big")
	}
}

func BenchmarkDownload100MBDirect(b *testing.B)    { benchDownload(b, "direct") }
func BenchmarkDownload100MBTunnel(b *testing.B)    { benchDownload(b, "tunnel") }
func BenchmarkDownload100MBIntercept(b *testing.B) { benchDownload(b, "intercept") }
