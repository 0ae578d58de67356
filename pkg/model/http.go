package model

import (
	"bufio"
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
	// noStream asks for whole responses (see [Config.NoStream]).
	noStream bool
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
		noStream:    cfg.NoStream,
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

// wire is how one provider's successful responses are read.
type wire struct {
	// json decodes a whole JSON response: from a compatible server that
	// answers application/json although asked to stream.
	json func(data []byte) (Response, error)
	// stream decodes a streamed response as its events arrive, handing
	// each piece of content to emit (nil when no one listens). It returns
	// once the stream's end event is read; an error event returns an
	// [*APIError] from [eventError], a stream that ends before its end
	// event an error that retrying may mend, and an event it cannot
	// decode a [notRetried].
	stream func(r *sseReader, emit func(Delta)) (Response, error)
}

// notRetried marks a failure that sending the request again would not
// mend: a response we cannot decode. It is returned unwrapped, and does
// not match [ErrPermanent]: the caller may retry later.
type notRetried struct{ err error }

func (e notRetried) Error() string { return e.err.Error() }
func (e notRetried) Unwrap() error { return e.err }

// post sends body and returns the response of the first attempt that
// succeeds, decoded by w; onDelta, when set, hears the pieces of each
// attempt's response as they are read. A non-retryable error status or
// error event returns its [*APIError]; when the attempts run out, or a
// wait would be too long or pass ctx's deadline, the error wraps the last
// failure and does not match [ErrPermanent]. A stream cut before its end
// is asked again, like a 5xx.
func (p *poster) post(ctx context.Context, body []byte, w wire, onDelta func(Delta)) (Response, error) {
	for attempt := 1; ; attempt++ {
		resp, err := p.try(ctx, attempt, body, w, onDelta)
		if err == nil {
			return resp, nil
		}
		if ctx.Err() != nil {
			if errors.Is(err, ctx.Err()) {
				return Response{}, err
			}
			return Response{}, fmt.Errorf("%w: %w", context.Cause(ctx), err)
		}
		var final notRetried
		if errors.As(err, &final) {
			return Response{}, final.err
		}
		var apiErr *APIError
		isAPI := errors.As(err, &apiErr)
		if (isAPI && !retryable(apiErr.Status)) || errors.Is(err, ErrPermanent) {
			return Response{}, err
		}
		if attempt >= p.maxAttempts {
			return Response{}, fmt.Errorf("%s: giving up after %d attempts: %w", p.provider, attempt, err)
		}
		wait := jitter(p.backoff, attempt)
		if isAPI && apiErr.hasRetryAfter {
			wait = apiErr.retryAfter
			if wait > maxRetryAfter {
				return Response{}, fmt.Errorf("%s: not waiting the %v the server asked for: %w", p.provider, wait, err)
			}
		}
		if d, ok := ctx.Deadline(); ok && time.Until(d) < wait {
			return Response{}, fmt.Errorf("%s: a retry in %v would pass the deadline: %w", p.provider, wait, err)
		}
		p.log.WarnContext(ctx, "model request failed, retrying",
			"provider", p.provider, "attempt", attempt, "wait", wait, "err", err)
		if err := sleep(ctx, wait); err != nil {
			return Response{}, fmt.Errorf("%s: %w", p.provider, err)
		}
	}
}

// try makes one attempt, bounded by the per-attempt timeout, reading
// the response as it streams in.
func (p *poster) try(ctx context.Context, attempt int, body []byte, w wire, onDelta func(Delta)) (Response, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(body))
	if err != nil {
		return Response{}, fmt.Errorf("%s: %w: %w", p.provider, ErrPermanent, err)
	}
	req.Header.Set("content-type", "application/json")
	req.Header.Set("accept", "text/event-stream, application/json")
	p.auth(req.Header)
	resp, err := p.client.Do(req)
	if err != nil {
		return Response{}, fmt.Errorf("%s: %w", p.provider, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// A short error body is read whole; an unread rest is dropped with the connection.
		data, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		e := parseAPIError(p.provider, resp.StatusCode, resp.Header, data, p.key)
		e.retryAfter, e.hasRetryAfter = retryAfter(resp.Header, time.Now())
		return Response{}, e
	}
	var emit func(Delta)
	if onDelta != nil {
		emit = func(d Delta) {
			d.Attempt = attempt
			onDelta(d)
		}
	}
	capped := &cappedReader{r: resp.Body, left: maxBody}
	if mediaType(resp.Header.Get("content-type")) == "application/json" {
		data, err := readBody(capped, resp.ContentLength, maxBody+1)
		return p.whole(data, err, w, emit)
	}
	br := bufio.NewReaderSize(capped, sseBuffer)
	if mediaType(resp.Header.Get("content-type")) != "text/event-stream" && startsJSON(br) {
		data, err := io.ReadAll(br)
		return p.whole(data, err, w, emit)
	}
	out, err := w.stream(newSSEReader(br), emit)
	if err != nil {
		var apiErr *APIError
		if errors.As(err, &apiErr) {
			apiErr.RequestID = requestID(resp.Header)
			apiErr.Message = redact(apiErr.Message, p.key)
		}
		return Response{}, err
	}
	// Read on to the end of the body, which follows the end event at
	// once, so that the transport keeps the connection for the next
	// request; a server that keeps the stream open past drainWait loses
	// it instead.
	t := time.AfterFunc(drainWait, cancel)
	_, _ = io.Copy(io.Discard, io.LimitReader(br, maxDrain))
	t.Stop()
	return out, nil
}

// whole decodes a response that came whole, as JSON, and tells emit its
// content, one piece per block.
func (p *poster) whole(data []byte, err error, w wire, emit func(Delta)) (Response, error) {
	if err != nil {
		return Response{}, fmt.Errorf("%s: read response: %w", p.provider, err)
	}
	out, err := w.json(data)
	if err != nil {
		return Response{}, notRetried{err}
	}
	if emit != nil {
		for i, b := range out.Content {
			switch b.Type {
			case TextBlock:
				emit(Delta{Index: i, Kind: DeltaText, Text: b.Text})
			case ThinkingBlock:
				emit(Delta{Index: i, Kind: DeltaThinking, Text: b.Thinking})
			case ToolUseBlock:
				emit(Delta{Index: i, Kind: DeltaToolUse, Text: inputArguments(b.Input), ID: b.ID, Name: b.Name})
			}
		}
	}
	return out, nil
}

// Reading a streamed response.
const (
	// sseBuffer is the reader's buffer: lines longer than it are
	// gathered, up to maxBody.
	sseBuffer = 32 << 10
	// drainWait and maxDrain bound what is read after the end event.
	drainWait = 250 * time.Millisecond
	maxDrain  = 64 << 10
)

// mediaType returns the media type of a content-type header, lowercase.
func mediaType(contentType string) string {
	t, _, _ := strings.Cut(contentType, ";")
	return strings.ToLower(strings.TrimSpace(t))
}

// startsJSON reports whether the body br reads starts, after white
// space, with a JSON object, the way a response that ignored "stream"
// does when its content type does not say.
func startsJSON(br *bufio.Reader) bool {
	for n := 1; n <= sseBuffer; n++ {
		peek, err := br.Peek(n)
		if len(peek) < n {
			return false
		}
		switch peek[n-1] {
		case ' ', '\t', '\r', '\n':
			if err != nil {
				return false
			}
			continue
		case '{':
			return true
		}
		return false
	}
	return false
}

// cappedReader reads r, failing once more than left bytes would be read.
type cappedReader struct {
	r    io.Reader
	left int64
}

func (c *cappedReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		var one [1]byte
		n, err := c.r.Read(one[:])
		if n > 0 {
			return 0, fmt.Errorf("response is larger than %d MiB", maxBody>>20)
		}
		return 0, err
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
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
