package model

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Defaults and limits of the HTTP exchange with a provider.
const (
	defaultMaxAttempts = 5
	defaultTimeout     = 10 * time.Minute
	defaultBackoff     = 500 * time.Millisecond
	maxBackoff         = 30 * time.Second
	// maxRetryAfter is the longest retry-after we wait out; a provider
	// asking for more gets its error returned, for the caller to retry later.
	maxRetryAfter = 60 * time.Second
	// maxBody bounds a successful response body.
	maxBody = 32 << 20
	// maxErrorBody bounds the part of an error response body we read.
	maxErrorBody = 64 << 10
)

// defaultClient sends the requests of providers configured without a
// client. Unlike [http.DefaultClient], whose transport keeps two idle
// connections per host, it keeps one for every step a busy harness has
// waiting on the same provider, so that requests do not dial anew.
var defaultClient = &http.Client{Transport: func() http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 512
	t.MaxIdleConnsPerHost = 256
	return t
}()}

// poster sends JSON requests to one provider endpoint, retrying the failures
// that may pass.
type poster struct {
	provider string
	url      string
	key      Secret
	// auth sets the provider's headers, including its credentials.
	auth        func(h http.Header)
	client      *http.Client
	maxAttempts int
	timeout     time.Duration
	backoff     time.Duration
	log         *slog.Logger
}

func newPoster(provider, url string, cfg Config, auth func(h http.Header)) *poster {
	p := &poster{
		provider:    provider,
		url:         url,
		key:         cfg.APIKey,
		auth:        auth,
		client:      cfg.HTTPClient,
		maxAttempts: cfg.MaxAttempts,
		timeout:     cfg.Timeout,
		backoff:     cfg.Backoff,
		log:         cfg.Logger,
	}
	if p.client == nil {
		p.client = defaultClient
	}
	if p.maxAttempts <= 0 {
		p.maxAttempts = defaultMaxAttempts
	}
	if p.timeout <= 0 {
		p.timeout = defaultTimeout
	}
	if p.backoff <= 0 {
		p.backoff = defaultBackoff
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	return p
}

// post sends body and returns the response body of the first attempt that
// succeeds. A non-retryable error status returns its [*APIError]; when the
// attempts run out, or a wait would be too long or pass ctx's deadline, the
// error wraps the last failure and does not match [ErrPermanent].
func (p *poster) post(ctx context.Context, body []byte) ([]byte, error) {
	for attempt := 1; ; attempt++ {
		data, err := p.try(ctx, body)
		if err == nil {
			return data, nil
		}
		if ctx.Err() != nil {
			if errors.Is(err, ctx.Err()) {
				return nil, err
			}
			return nil, fmt.Errorf("%w: %w", context.Cause(ctx), err)
		}
		var apiErr *APIError
		isAPI := errors.As(err, &apiErr)
		if (isAPI && !retryable(apiErr.Status)) || errors.Is(err, ErrPermanent) {
			return nil, err
		}
		if attempt >= p.maxAttempts {
			return nil, fmt.Errorf("%s: giving up after %d attempts: %w", p.provider, attempt, err)
		}
		wait := jitter(p.backoff, attempt)
		if isAPI && apiErr.hasRetryAfter {
			wait = apiErr.retryAfter
			if wait > maxRetryAfter {
				return nil, fmt.Errorf("%s: not waiting the %v the server asked for: %w", p.provider, wait, err)
			}
		}
		if d, ok := ctx.Deadline(); ok && time.Until(d) < wait {
			return nil, fmt.Errorf("%s: a retry in %v would pass the deadline: %w", p.provider, wait, err)
		}
		p.log.WarnContext(ctx, "model request failed, retrying",
			"provider", p.provider, "attempt", attempt, "wait", wait, "err", err)
		if err := sleep(ctx, wait); err != nil {
			return nil, fmt.Errorf("%s: %w", p.provider, err)
		}
	}
}

// try makes one attempt, bounded by the per-attempt timeout.
func (p *poster) try(ctx context.Context, body []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", p.provider, ErrPermanent, err)
	}
	req.Header.Set("content-type", "application/json")
	req.Header.Set("accept", "application/json")
	p.auth(req.Header)
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.provider, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// A short error body is read whole; an unread rest is dropped with the connection.
		data, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		e := parseAPIError(p.provider, resp, data, p.key)
		e.retryAfter, e.hasRetryAfter = retryAfter(resp.Header, time.Now())
		return nil, e
	}
	data, err := readBody(resp.Body, resp.ContentLength, maxBody+1)
	if err != nil {
		return nil, fmt.Errorf("%s: read response: %w", p.provider, err)
	}
	if len(data) > maxBody {
		return nil, fmt.Errorf("%s: response is larger than %d MiB", p.provider, maxBody>>20)
	}
	return data, nil
}

// readBody reads at most limit bytes of r, into a buffer of the size the
// response announced when it did.
func readBody(r io.Reader, size, limit int64) ([]byte, error) {
	if size <= 0 || size > limit {
		return io.ReadAll(io.LimitReader(r, limit))
	}
	var b bytes.Buffer
	b.Grow(int(size) + bytes.MinRead)
	_, err := b.ReadFrom(io.LimitReader(r, limit))
	return b.Bytes(), err
}

// retryAfter reads how long the server asked us to wait: retry-after-ms in
// milliseconds, else retry-after in seconds or as an HTTP date.
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if ms, ok := parseNumber(h.Get("retry-after-ms")); ok {
		return seconds(ms / 1000), true
	}
	v := strings.TrimSpace(h.Get("retry-after"))
	if v == "" {
		return 0, false
	}
	if s, ok := parseNumber(v); ok {
		return seconds(s), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

func parseNumber(s string) (float64, bool) {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return 0, false
	}
	return f, true
}

// seconds converts s to a Duration, saturating instead of overflowing.
func seconds(s float64) time.Duration {
	if s > float64(math.MaxInt64/int64(time.Second)) {
		return math.MaxInt64
	}
	return time.Duration(s * float64(time.Second))
}

// jitter returns the wait before retry number n (from 1): base doubled
// n-1 times, capped at maxBackoff, of which the upper half is random.
func jitter(base time.Duration, n int) time.Duration {
	d := base
	for i := 1; i < n && d < maxBackoff; i++ {
		d *= 2
	}
	d = min(d, maxBackoff)
	return d/2 + rand.N(d/2+1)
}

// sleep waits for d or until ctx is done, returning ctx's cause then.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
