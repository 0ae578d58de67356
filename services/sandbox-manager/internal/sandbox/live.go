package sandbox

import (
	"io"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A Bash call's output is heard as it is written when its caller listens
// ([Driver.RunWithOutput]): the executor sends it to the manager in
// partial messages before the response, up to the request's Live bytes.
// The response's Output is kept as before, whatever was sent live.

// liveChunk bounds the output of one partial message: its line stays far
// below the bound of a response's ([box.maxResp]).
const liveChunk = 16 << 10

// liveCoalesce is how long output written within it of the last partial
// message waits for more before it is sent: output after a quiet spell goes
// at once, and a command writing many short lines sends a few messages a
// window, not one a line.
const liveCoalesce = 5 * time.Millisecond

// liveWriter sends a request's output to the manager in partial messages
// as it is written, up to left bytes. It is used by the one goroutine that
// drains the call's output, before the response is written.
type liveWriter struct {
	out     io.Writer
	id      uint64
	left    int
	pending []byte
	// last is when the last partial message was sent.
	last time.Time
	// cut is set once output beyond left was written: a last message
	// says so, and nothing more is sent.
	cut  bool
	sent bool // the message with cut is sent
	// failed is set once a write to the manager failed: the response
	// fails the same way.
	failed bool
}

func newLiveWriter(out io.Writer, id uint64, limit int) *liveWriter {
	return &liveWriter{out: out, id: id, left: limit}
}

// add takes output p as the command wrote it.
func (w *liveWriter) add(p []byte) {
	if w.cut {
		return
	}
	k := min(len(p), w.left)
	w.pending = append(w.pending, p[:k]...)
	w.left -= k
	if k < len(p) {
		w.cut = true
		w.flush()
		return
	}
	if len(w.pending) >= liveChunk || time.Since(w.last) >= liveCoalesce {
		w.flush()
	}
}

// due returns how long what is pending may wait for more output before it
// is sent, and false when nothing is pending (or w is nil).
func (w *liveWriter) due() (time.Duration, bool) {
	if w == nil || len(w.pending) == 0 {
		return 0, false
	}
	return max(liveCoalesce-time.Since(w.last), 0), true
}

// flush sends what is pending, in messages of at most liveChunk bytes,
// and the cut once it came.
func (w *liveWriter) flush() {
	for !w.failed && (len(w.pending) > 0 || w.cut && !w.sent) {
		n := min(len(w.pending), liveChunk)
		last := n == len(w.pending)
		msg := response{ID: w.id, Partial: true, Live: w.pending[:n], Cut: w.cut && last}
		if err := writeMsg(w.out, msg); err != nil {
			w.failed = true
		}
		w.pending = w.pending[n:]
		w.sent = msg.Cut
	}
	w.pending = nil
	w.last = time.Now()
}

// waitReadable waits at most d for fd to be readable (or closed), and
// reports whether it is.
func waitReadable(fd int, d time.Duration) bool {
	ms := int((d + time.Millisecond - 1) / time.Millisecond)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, ms)
		if err == syscall.EINTR {
			continue
		}
		// On an error the read that follows meets it too.
		return n != 0 || err != nil
	}
}
