package sandbox

import (
	"fmt"
	"strings"
)

// cappedBuffer keeps the first limit bytes written to it and counts the rest.
// Writes never fail, so a child writing to it is drained and never blocks on
// a full pipe. It is not safe for concurrent use.
type cappedBuffer struct {
	buf     []byte
	limit   int
	omitted int64
}

func newCappedBuffer(limit int) *cappedBuffer {
	return &cappedBuffer{limit: limit}
}

// Write implements [io.Writer].
func (b *cappedBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if room := b.limit - len(b.buf); room > 0 {
		k := min(room, len(p))
		b.buf = append(b.buf, p[:k]...)
		p = p[k:]
	}
	b.omitted += int64(len(p))
	return n, nil
}

// WriteString writes s; it spares callers a conversion.
func (b *cappedBuffer) WriteString(s string) (int, error) {
	return b.Write([]byte(s))
}

// truncated reports whether anything was dropped.
func (b *cappedBuffer) truncated() bool {
	return b.omitted > 0
}

// String returns what was kept, with invalid UTF-8 replaced, followed by a
// note of how much was dropped if anything was.
func (b *cappedBuffer) String() string {
	s := strings.ToValidUTF8(string(b.buf), "\uFFFD")
	if b.omitted > 0 {
		s += fmt.Sprintf("\n[output truncated: %d bytes omitted]", b.omitted)
	}
	return s
}
