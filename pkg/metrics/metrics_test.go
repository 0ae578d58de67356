package metrics_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"corral.dev/pkg/metrics"
	"corral.dev/pkg/natstest"
)

func TestHealthFollowsTheConnection(t *testing.T) {
	_, nc, _ := natstest.Run(t)
	reg := metrics.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "corral_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Add(3)
	srv := httptest.NewServer(metrics.Handler(reg, metrics.Connected(nc)))
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != http.StatusOK || strings.TrimSpace(body) != "ok" {
		t.Errorf("healthy: %d %q", code, body)
	}
	if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, "corral_test_total 3") {
		t.Errorf("metrics: %d %q", code, body)
	}
	nc.Close()
	if code, body := get("/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "CLOSED") {
		t.Errorf("after the connection closed: %d %q", code, body)
	}
}

func TestToolLabel(t *testing.T) {
	seen := map[string]bool{}
	for _, name := range []string{"Bash", "Read", "Write", "Edit", "Glob", "Grep", "bash", "", "made_up", "Bash ", strings.Repeat("x", 1000)} {
		seen[metrics.Tool(name)] = true
	}
	for i := range 1000 {
		seen[metrics.Tool(fmt.Sprint("tool_", i))] = true
	}
	if len(seen) != 7 || !seen[metrics.Other] || !seen["Grep"] {
		t.Errorf("label values = %v, want the six tools and %q", seen, metrics.Other)
	}
}
