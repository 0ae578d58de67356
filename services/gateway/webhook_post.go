package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"corral.dev/pkg/netaddr"
	"corral.dev/pkg/webhookapi"
)

// errPrivate is returned for a receiver whose address is not public while
// private addresses are not allowed.
var errPrivate = errors.New("not a public address (CORRAL_WEBHOOK_ALLOW_PRIVATE=on allows it)")

// public reports whether a is an address an outside receiver may have
// (see [netaddr.Internal]).
func public(a netip.Addr) bool { return !netaddr.Internal(a) }

// redactURL is raw as logs and recorded errors show it: its scheme and
// host alone. A receiver's path or query often is its secret (a chat
// service's incoming webhook, a token parameter), and a URL's user
// information always is.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(an unreadable URL)"
	}
	r := u.Scheme + "://" + u.Host
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" {
		r += "/…"
	}
	return r
}

// checkURL checks a webhook's URL as it is added: http or https, a host,
// no credentials (the signature says the POST is Corral's), and, unless
// allowPrivate, no host that is plainly not public. A name that resolves
// to a private address is refused when the POST dials it.
func checkURL(raw string, allowPrivate bool) (*url.URL, error) {
	if len(raw) > 2048 {
		return nil, fmt.Errorf("url: longer than 2048 bytes")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("url %q: %w", raw, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("url %q: want an http:// or https:// URL", raw)
	case u.Hostname() == "":
		return nil, fmt.Errorf("url %q: no host", raw)
	case u.User != nil:
		return nil, fmt.Errorf("url %q: no credentials in the URL: receivers check the webhook-signature header", raw)
	case u.Fragment != "":
		return nil, fmt.Errorf("url %q: no fragment (#...)", raw)
	}
	if allowPrivate {
		return u, nil
	}
	host := strings.ToLower(u.Hostname())
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return nil, fmt.Errorf("url %q: %s is %w", raw, host, errPrivate)
	}
	if a, err := netip.ParseAddr(host); err == nil && !public(a) {
		return nil, fmt.Errorf("url %q: %s is %w", raw, host, errPrivate)
	}
	return u, nil
}

// poster posts webhooks: over its own transport, which dials public
// addresses only (unless allowed otherwise) whatever a name resolves to
// when it is dialled, uses no proxy, and follows no redirect.
type poster struct {
	client *http.Client
}

func newPoster(cfg WebhookConfig) *poster {
	dialer := &net.Dialer{Timeout: cfg.Timeout}
	if !cfg.AllowPrivate {
		// Checked on the address actually dialled, after resolution: a
		// name that resolves to a private address (or is made to, once
		// checked) is refused.
		dialer.Control = func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return err
			}
			if !public(ap.Addr()) {
				return fmt.Errorf("%s is %w", ap.Addr(), errPrivate)
			}
			return nil
		}
	}
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           dialer.DialContext,
		TLSHandshakeTimeout:   cfg.Timeout,
		ResponseHeaderTimeout: cfg.Timeout,
		MaxIdleConnsPerHost:   2,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	return &poster{client: &http.Client{
		Transport: tr,
		Timeout:   cfg.Timeout,
		// A redirect is not followed, to another host or the same: it is
		// an answer other than 2xx, and the attempt failed.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// post posts body to the webhook URL to, as message msgID signed at now
// with secret, and returns the receiver's status (0 for none) and why the
// attempt failed (nil for a 2xx answer).
func (p *poster) post(ctx context.Context, to, secret, msgID string, now time.Time, body []byte) (int, error) {
	sig, err := webhookapi.Sign(secret, msgID, now, body)
	if err != nil {
		return 0, fmt.Errorf("sign: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, to, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Corral-Webhooks/1")
	req.Header.Set("webhook-id", msgID)
	req.Header.Set("webhook-timestamp", webhookapi.Timestamp(now))
	req.Header.Set("webhook-signature", sig)
	resp, err := p.client.Do(req)
	if err != nil {
		// Recorded with the delivery and logged: without the URL's path.
		if ue := (*url.Error)(nil); errors.As(err, &ue) {
			ue.URL = redactURL(ue.URL)
		}
		return 0, err
	}
	defer resp.Body.Close()
	// Read a little, so that the connection can be used again.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, fmt.Errorf("the receiver answered %s", resp.Status)
	}
	return resp.StatusCode, nil
}
