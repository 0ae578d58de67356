package gateway

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestWebhookURLs checks what a webhook's URL may be: http or https, no
// credentials, and unless private addresses are allowed none that is
// plainly not public.
func TestWebhookURLs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		url          string
		allowPrivate bool
		ok           bool
	}{
		{"https://hooks.example.com/corral", false, true},
		{"http://93.184.215.14:8080/x", false, true},
		{"ftp://hooks.example.com/", false, false},
		{"file:///etc/passwd", false, false},
		{"hooks.example.com/corral", false, false},
		{"https://user:pw@hooks.example.com/", false, false},
		{"https://hooks.example.com/#frag", false, false},
		{"http://127.0.0.1:9000/", false, false},
		{"http://localhost:9000/", false, false},
		{"http://10.1.2.3/", false, false},
		{"http://169.254.169.254/latest/meta-data/", false, false},
		{"http://[::1]/", false, false},
		{"http://[::ffff:10.0.0.1]/", false, false},
		{"http://100.64.1.1/", false, false},
		{"http://0.0.0.0/", false, false},
		{"http://127.0.0.1:9000/", true, true},
		{"http://localhost:9000/", true, true},
		{"gopher://127.0.0.1/", true, false},
	}
	for _, tc := range tests {
		_, err := checkURL(tc.url, tc.allowPrivate)
		if (err == nil) != tc.ok {
			t.Errorf("checkURL(%q, allowPrivate %v) = %v, want ok %v", tc.url, tc.allowPrivate, err, tc.ok)
		}
	}
}

// TestWebhookPostDialsPublicAddressesOnly posts to a receiver on
// loopback: refused when dialled unless private addresses are allowed,
// whatever the URL's check said; and a redirect is not followed.
func TestWebhookPostDialsPublicAddressesOnly(t *testing.T) {
	t.Parallel()
	hits := make(chan string, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits <- r.URL.Path
		if r.URL.Path == "/moved" {
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		}
	}))
	t.Cleanup(srv.Close)
	secret := newSecret()
	ctx := context.Background()

	_, err := newPoster(WebhookConfig{Timeout: 5 * time.Second}).post(ctx, srv.URL+"/hook/T0123/s3cr3t-path?token=s3cr3t-query", secret, "msg_1", time.Now(), []byte("{}"))
	if !errors.Is(err, errPrivate) {
		t.Errorf("a post to loopback: %v, want it refused as not public", err)
	}
	// The error is recorded and logged: the URL's path and query, often
	// the receiver's secret, are not in it.
	if err != nil && strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("a failed post's error shows the URL's secret parts: %v", err)
	}
	allowed := newPoster(WebhookConfig{Timeout: 5 * time.Second, AllowPrivate: true})
	if status, err := allowed.post(ctx, srv.URL+"/hook", secret, "msg_2", time.Now(), []byte("{}")); err != nil || status != http.StatusOK {
		t.Errorf("a post to loopback, allowed: %d %v", status, err)
	}
	if status, err := allowed.post(ctx, srv.URL+"/moved", secret, "msg_3", time.Now(), []byte("{}")); err == nil || status != http.StatusFound {
		t.Errorf("a redirect: %d %v, want the 302 as a failure", status, err)
	}
	close(hits)
	var paths []string
	for p := range hits {
		paths = append(paths, p)
	}
	if len(paths) != 2 || paths[0] != "/hook" || paths[1] != "/moved" {
		t.Errorf("the receiver took %v, want /hook (allowed) and /moved, never the redirect's target", paths)
	}
}
