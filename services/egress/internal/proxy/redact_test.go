package proxy

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"
)

func TestRedactor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in, want string
		secrets        []string
	}{
		{"none", "nothing to see", "nothing to see", []string{"s3cret"}},
		{"one", "token s3cret here", "token [REDACTED] here", []string{"s3cret"}},
		{"at ends", "s3cret mid s3cret", "[REDACTED] mid [REDACTED]", []string{"s3cret"}},
		{"adjacent", "s3crets3cret", "[REDACTED][REDACTED]", []string{"s3cret"}},
		{"longest wins", "dXNlcjpzM2NyZXQ= and s3cret", "[REDACTED] and [REDACTED]", []string{"s3cret", "dXNlcjpzM2NyZXQ="}},
		{"overlapping prefix", "s3cs3cret", "s3c[REDACTED]", []string{"s3cret"}},
		{"partial at end", "ends with s3cre", "ends with s3cre", []string{"s3cret"}},
		{"empty secret ignored", "abc", "abc", []string{"", "zz"}},
		{"empty", "", "", []string{"s3cret"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, wrap := range []struct {
				name string
				r    func(io.Reader) io.Reader
			}{
				{"whole", func(r io.Reader) io.Reader { return r }},
				{"byte by byte", iotest.OneByteReader},
				{"half", iotest.HalfReader},
				{"data with EOF", iotest.DataErrReader},
			} {
				src := io.NopCloser(wrap.r(strings.NewReader(tc.in)))
				s := secrets(tc.secrets)
				var r io.Reader = src
				if len(s) > 0 {
					r = newRedactor(src, s, nil)
				}
				got, err := io.ReadAll(iotest.OneByteReader(r))
				if err != nil || string(got) != tc.want {
					t.Errorf("%s: got %q, %v, want %q", wrap.name, got, err, tc.want)
				}
			}
		})
	}
}

// TestRedactorLarge streams a large body with secrets at random places
// through random read sizes.
func TestRedactorLarge(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	secret := "ghp_0123456789abcdefghijklmnopqrstuvwxyz"
	var in, want bytes.Buffer
	for in.Len() < 1<<20 {
		filler := bytes.Repeat([]byte{'.'}, rng.IntN(100000))
		in.Write(filler)
		want.Write(filler)
		in.WriteString(secret)
		want.WriteString(Redacted)
	}
	calledEOF := 0
	r := newRedactor(io.NopCloser(&randomReader{r: &in, rng: rng}), secrets([]string{secret}), func() { calledEOF++ })
	got, err := io.ReadAll(&randomReader{r: r, rng: rng})
	if err != nil || !bytes.Equal(got, want.Bytes()) {
		t.Errorf("got %d bytes (%v), want %d with every secret redacted", len(got), err, want.Len())
	}
	if calledEOF != 1 {
		t.Errorf("atEOF called %d times, want once", calledEOF)
	}
}

// randomReader reads from r at most a random number of bytes at a time.
type randomReader struct {
	r   io.Reader
	rng *rand.Rand
}

func (r *randomReader) Read(p []byte) (int, error) {
	return r.r.Read(p[:min(len(p), 1+r.rng.IntN(70000))])
}

func TestRedactHeader(t *testing.T) {
	t.Parallel()
	h := http.Header{"Location": {"https://x.test/?token=s3cret"}, "X-Other": {"a", "s3cret s3cret"}}
	redactHeader(h, secrets([]string{"s3cret"}))
	if got := h.Get("Location"); got != "https://x.test/?token=[REDACTED]" {
		t.Errorf("Location %q", got)
	}
	if got := h.Values("X-Other"); got[0] != "a" || got[1] != "[REDACTED] [REDACTED]" {
		t.Errorf("X-Other %q", got)
	}
}
