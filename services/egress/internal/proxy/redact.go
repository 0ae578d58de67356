package proxy

import (
	"bytes"
	"cmp"
	"io"
	"net/http"
	"slices"
	"strings"
)

// Redacted is what replaces a secret in a response.
const Redacted = "[REDACTED]"

// redactBufSize is how much a redactor reads at a time.
const redactBufSize = 64 << 10

// secrets returns the non-empty strings of redact, longest first, so that
// of two matching at one place the longer wins.
func secrets(redact []string) []string {
	s := slices.DeleteFunc(slices.Clone(redact), func(s string) bool { return s == "" })
	slices.SortFunc(s, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	return slices.Compact(s)
}

// redactHeader replaces every secret in the values of h.
func redactHeader(h http.Header, secrets []string) {
	if len(secrets) == 0 {
		return
	}
	pairs := make([]string, 0, 2*len(secrets))
	for _, s := range secrets {
		pairs = append(pairs, s, Redacted)
	}
	r := strings.NewReplacer(pairs...)
	for _, vs := range h {
		for i, v := range vs {
			vs[i] = r.Replace(v)
		}
	}
}

// redactor streams src with every secret replaced by [Redacted]. It holds
// back the last len(longest)-1 bytes it has read, which may be the start
// of a secret split across reads, until it reads more or src ends.
type redactor struct {
	src  io.ReadCloser
	pats [][]byte
	hold int
	in   []byte // read from src, not yet scanned
	out  []byte // scanned, not yet returned
	off  int    // how much of out was returned
	err  error  // what src returned last, once not nil
	// atEOF runs once src ends (the response's trailers are then known).
	atEOF func()
}

// newRedactor redacts secrets (from [secrets]: non-empty, longest first)
// in src and calls atEOF, if not nil, when src reaches its end.
func newRedactor(src io.ReadCloser, secrets []string, atEOF func()) *redactor {
	r := &redactor{src: src, atEOF: atEOF}
	for _, s := range secrets {
		r.pats = append(r.pats, []byte(s))
	}
	r.hold = len(secrets[0]) - 1
	r.in = make([]byte, 0, redactBufSize+r.hold)
	return r
}

func (r *redactor) Read(p []byte) (int, error) {
	for r.off == len(r.out) {
		r.out, r.off = r.out[:0], 0
		if r.err != nil && len(r.in) == 0 {
			return 0, r.err
		}
		if r.err == nil {
			r.fill()
		}
		r.scan(r.err != nil)
	}
	n := copy(p, r.out[r.off:])
	r.off += n
	return n, nil
}

// fill reads once from src into the free space of in.
func (r *redactor) fill() {
	n, err := r.src.Read(r.in[len(r.in):cap(r.in)])
	r.in = r.in[:len(r.in)+n]
	if err != nil {
		r.err = err
		if err == io.EOF && r.atEOF != nil {
			r.atEOF()
		}
	}
}

// scan moves what of in cannot be the start of a secret any more (all of
// it when final) to out, secrets replaced.
func (r *redactor) scan(final bool) {
	end := len(r.in) // secrets starting before end are replaced now
	if !final {
		end -= r.hold
	}
	i := 0
	for i < end {
		j, n := r.next(i, end)
		if j < 0 {
			r.out = append(r.out, r.in[i:end]...)
			i = end
			break
		}
		r.out = append(r.out, r.in[i:j]...)
		r.out = append(r.out, Redacted...)
		i = j + n
	}
	r.in = r.in[:copy(r.in, r.in[i:])]
}

// next finds the first secret in in that starts at or after i and before
// end, and returns where it starts and its length; -1 when none does.
func (r *redactor) next(i, end int) (at, n int) {
	at = -1
	for _, p := range r.pats {
		k := bytes.Index(r.in[i:], p)
		if k >= 0 && i+k < end && (at < 0 || i+k < at) {
			at, n = i+k, len(p)
		}
	}
	return at, n
}

func (r *redactor) Close() error {
	return r.src.Close()
}
