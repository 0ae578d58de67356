package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"corral.dev/pkg/egressapi"
)

// The relay is how a sandbox with network reaches the egress service. Its
// network namespace has only loopback, and programs speak to a proxy over
// TCP, not over a Unix socket: so the executor listens on the sandbox's
// own 127.0.0.1:[egressapi.ProxyPort] and relays each connection to the
// socket bound at [egressapi.SandboxDir], which the egress service made
// for this sandbox alone. Bytes are copied as they come, both ways; each
// way's end is passed on as a half-close, so that a client may finish its
// request and still read the answer. The relay adds an accept, a connect
// and a copy (a splice, where the kernel can) to each connection, and
// about ten thread switches in the executor: 0.05 to 0.2 ms on a small
// VM (see BenchmarkEgressRelay).

// maxRelayed bounds the connections relayed at once, far above what a
// build or a package manager opens. Each holds up to six of the
// executor's descriptors (two sockets, and a pipe each way while it
// splices), which its own calls need too; past the bound, connections
// wait in the listener's backlog.
const maxRelayed = 128

// relay accepts connections on the proxy port and relays each to the
// egress socket, in goroutines it owns.
type relay struct {
	ln     *net.TCPListener
	socket string
	slots  chan struct{} // one per connection relayed
	done   chan struct{} // closed by close
	wg     sync.WaitGroup

	mu     sync.Mutex
	conns  map[io.Closer]struct{} // both ends of each connection relayed
	closed bool
}

// startRelay listens on the proxy port and relays what it accepts to
// socket. It returns an error if the port cannot be had; ctx bounds only
// that.
func startRelay(ctx context.Context, socket string) (*relay, error) {
	// No keep-alive probes on the loopback: they would cost four
	// setsockopts on every connection accepted.
	lc := net.ListenConfig{KeepAlive: -1}
	ln, err := lc.Listen(ctx, "tcp4", fmt.Sprintf("127.0.0.1:%d", egressapi.ProxyPort))
	if err != nil {
		return nil, fmt.Errorf("egress relay: %w", err)
	}
	r := &relay{
		ln:     ln.(*net.TCPListener),
		socket: socket,
		slots:  make(chan struct{}, maxRelayed),
		done:   make(chan struct{}),
		conns:  make(map[io.Closer]struct{}),
	}
	r.wg.Go(r.accept)
	return r, nil
}

// relayIfNetwork starts the relay if the sandbox has an egress socket, and
// returns nil otherwise. An egress directory the executor cannot read is
// an error, not a sandbox without network.
func relayIfNetwork(ctx context.Context) (*relay, error) {
	socket := egressapi.SandboxDir + "/" + egressapi.SocketName
	if _, err := os.Stat(socket); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("egress relay: %w", err)
	}
	return startRelay(ctx, socket)
}

func (r *relay) accept() {
	for {
		select {
		case r.slots <- struct{}{}:
		case <-r.done:
			return
		}
		c, err := r.ln.AcceptTCP()
		if err != nil {
			<-r.slots
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors, say: give the connections relayed a
			// moment to end rather than spin.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		r.wg.Go(func() {
			r.serve(c)
			<-r.slots
		})
	}
}

// serve relays one connection until both ways have ended, or either has
// failed, then closes both ends.
func (r *relay) serve(c *net.TCPConn) {
	u, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: r.socket, Net: "unix"})
	if err != nil {
		c.Close() // the client sees the connection end: the service is not there
		return
	}
	if !r.track(c, u) {
		c.Close()
		u.Close()
		return
	}
	var up sync.WaitGroup
	up.Go(func() { pipe(u, c) })
	pipe(c, u)
	up.Wait()
	r.untrack(c, u)
	c.Close()
	u.Close()
}

// halfCloser is a connection whose writing side can be closed alone.
type halfCloser interface {
	io.ReadWriteCloser
	CloseWrite() error
}

// pipe copies src to dst until src ends, then closes dst's writing side,
// so that dst's peer sees the end and may still answer. On a failure
// either way it closes both, which ends the other way too.
func pipe(dst, src halfCloser) {
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		src.Close()
		return
	}
	_ = dst.CloseWrite()
}

// track notes the ends of a connection relayed, unless the relay is
// closed.
func (r *relay) track(ends ...io.Closer) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	for _, e := range ends {
		r.conns[e] = struct{}{}
	}
	return true
}

func (r *relay) untrack(ends ...io.Closer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range ends {
		delete(r.conns, e)
	}
}

// drop closes every connection relayed. The executor drops them at the
// end of each call, when every process that could hold their clients is
// dead, so that none outlives its call waiting for the far end, and the
// egress service sees them end before the call's summary is drained.
func (r *relay) drop() {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for e := range r.conns {
		e.Close()
	}
}

// close stops the relay: it stops listening, closes every connection
// relayed, and waits for its goroutines to end.
func (r *relay) close() {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	close(r.done)
	r.ln.Close()
	r.drop()
	r.wg.Wait()
}
