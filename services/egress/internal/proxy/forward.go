package proxy

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"sync/atomic"
)

// servePlain handles an absolute-form request: plain HTTP.
func (s *session) servePlain(w http.ResponseWriter, r *http.Request) {
	if r.URL.Scheme != "http" {
		http.Error(w, "corral egress: only http:// URLs go in absolute form; use CONNECT for https", http.StatusBadRequest)
		return
	}
	t, err := parseTarget("http", r.URL.Host)
	if err != nil {
		http.Error(w, "corral egress: "+err.Error(), http.StatusBadRequest)
		return
	}
	s.serveRequest(w, r, t, false)
}

// serveRequest judges r, a request to t (whose Method and Path it fills
// in), holds it when the policy says so, and forwards it. Only a secure
// request (HTTPS, read inside an intercepted CONNECT) gets credentials.
func (s *session) serveRequest(w http.ResponseWriter, r *http.Request, t Target, secure bool) {
	t.Method, t.Path = r.Method, r.URL.Path
	if t.Path == "" {
		t.Path = "/"
	}
	e := &Entry{Target: t}
	defer func() { s.record(r.Context(), *e) }() // also when the response's copy panics to abort it
	if t.Method != strings.ToUpper(t.Method) {
		// Methods are case-sensitive: "post" is not what a rule over
		// "POST" judges, and some servers take it as POST.
		discard(r, false)
		refuse(w, e, "", "the method "+t.Method+" is not upper case")
		return
	}
	if err := checkPath(t.Path); err != nil {
		discard(r, false)
		refuse(w, e, "", err.Error())
		return
	}
	v := s.p.judge.Judge(s.id, t)
	e.Verdict = v
	switch {
	case !v.Known:
		discard(r, false)
		refuse(w, e, v.Rule, "the policy cannot decide on "+t.Method+" "+t.Path)
		return
	case v.Decision == Allow:
	case v.Decision == Approve:
		if !s.hold(w, r, e) {
			return
		}
	default:
		discard(r, false)
		refuse(w, e, v.Rule, denial(v, t))
		return
	}
	var inj Injection
	if secure {
		var err error
		if inj, err = s.p.creds.For(r.Context(), s.id, t.Host, t.Path); err != nil {
			s.p.log.WarnContext(r.Context(), "credentials lookup failed", "host", t.Host, "err", err)
			fail(w, e, http.StatusServiceUnavailable, "look up credentials: "+err.Error())
			return
		}
	}
	s.forward(w, r, t, inj, e)
}

// forward sends r to t, with inj's headers, and streams the response
// back, with inj's secrets redacted; it notes in e how it went.
func (s *session) forward(w http.ResponseWriter, r *http.Request, t Target, inj Injection, e *Entry) {
	redact := secrets(inj.Redact)
	var sent, received atomic.Int64 // the transport reads the body in a goroutine of its own
	defer func() { e.Sent, e.Received = sent.Load(), received.Load() }()
	rp := &httputil.ReverseProxy{
		Transport:     s.p.transport,
		BufferPool:    s.p.buffers,
		FlushInterval: flushInterval,
		ErrorLog:      s.p.errLog,
		Rewrite: func(pr *httputil.ProxyRequest) {
			out := pr.Out
			out.URL.Scheme, out.URL.Host, out.Host = t.Scheme, t.authority(), ""
			for k := range out.Header {
				if strings.HasPrefix(k, "X-Corral-") {
					delete(out.Header, k)
				}
			}
			for k, v := range inj.Headers {
				out.Header.Set(k, v)
			}
			// A switched protocol (websocket, h2c) would carry requests
			// nobody judges, and could not be redacted.
			out.Header.Del("Upgrade")
			out.Header.Del("Connection")
			if len(redact) > 0 {
				// Plain bodies can be redacted.
				out.Header.Set("Accept-Encoding", "identity")
			}
			if out.Body != nil {
				out.Body = &counted{ReadCloser: out.Body, n: &sent}
			}
		},
		ModifyResponse: func(resp *http.Response) error {
			e.Status = resp.StatusCode
			if len(redact) > 0 {
				if err := redactResponse(resp, r.Method, redact); err != nil {
					return err
				}
			}
			resp.Body = &counted{ReadCloser: resp.Body, n: &received}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, errInternal) {
				refuse(w, e, "", err.Error())
				return
			}
			fail(w, e, http.StatusBadGateway, fmt.Sprintf("%s: %v", t.hostPort(), err))
		},
	}
	if len(redact) == 0 {
		rp.ServeHTTP(w, r)
		return
	}
	bw := gather(w)
	rp.ServeHTTP(bw, r)
	bw.release()
}

// redactResponse makes resp's headers, body and trailers carry no secret.
func redactResponse(resp *http.Response, method string, secrets []string) error {
	redactHeader(resp.Header, secrets)
	if method == http.MethodHead || resp.Body == http.NoBody {
		return nil
	}
	switch ce := strings.ToLower(resp.Header.Get("Content-Encoding")); ce {
	case "", "identity":
	case "gzip": // asked for identity, got gzip: read it plain
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			return fmt.Errorf("read gzip body to redact it: %w", err)
		}
		resp.Body = struct {
			io.Reader
			io.Closer
		}{zr, resp.Body}
		resp.Header.Del("Content-Encoding")
	default:
		return fmt.Errorf("cannot redact a body of content encoding %q", ce)
	}
	resp.Body = newRedactor(resp.Body, secrets, func() { redactHeader(resp.Trailer, secrets) })
	// A redacted body may differ in length: without the header, it goes
	// chunked. ContentLength stays, so that a body whose length was known
	// is flushed every flushInterval rather than after every read, which
	// would cost a chunk and a TLS record per read.
	resp.Header.Del("Content-Length")
	return nil
}

// counted counts what is read from a body.
type counted struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c *counted) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// gathered is a response whose writes are gathered between flushes, so
// that a redacted body, sent chunked, goes in big chunks rather than one
// (and a TLS record more) per read from the upstream.
type gathered struct {
	http.ResponseWriter
	bw *bufio.Writer
}

var gatherPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4*copyBufSize) }}

func gather(w http.ResponseWriter) *gathered {
	bw := gatherPool.Get().(*bufio.Writer)
	bw.Reset(w)
	return &gathered{ResponseWriter: w, bw: bw}
}

func (g *gathered) Write(p []byte) (int, error) { return g.bw.Write(p) }

// WriteHeader drops interim responses (103 Early Hints), whose headers
// the reverse proxy copies from the upstream before any redaction.
func (g *gathered) WriteHeader(code int) {
	if code >= 100 && code < 200 {
		return
	}
	g.ResponseWriter.WriteHeader(code)
}

// FlushError sends what was gathered, and flushes the response.
func (g *gathered) FlushError() error {
	if err := g.bw.Flush(); err != nil {
		return err
	}
	return http.NewResponseController(g.ResponseWriter).Flush()
}

func (g *gathered) Unwrap() http.ResponseWriter { return g.ResponseWriter }

// release sends what was gathered; g may not be used again.
func (g *gathered) release() {
	g.bw.Flush()
	g.bw.Reset(nil)
	gatherPool.Put(g.bw)
}
