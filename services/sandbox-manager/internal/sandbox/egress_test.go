package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/google/uuid"

	"corral.dev/pkg/egressapi"
)

// testEgress stands in for the node's egress service. For each session
// it gives network it makes a directory holding a CA bundle and a Unix
// socket, served by an HTTP proxy stand-in: it answers every request with
// "hello via egress", except that it refuses those to refused.test, and
// that it takes the connection of one to echo.test over, reads it to its
// end and answers "got: " and what it read, and that of one to hold.test,
// answers "held" and holds it, never closing it, until the test ends. It
// records what it is asked and the requests it serves, and sums them up
// for Drain.
type testEgress struct {
	root string
	wg   sync.WaitGroup
	stop chan struct{} // closed when the test ends

	mu                      sync.Mutex
	openErr, drainErr       error
	noNetwork               map[uuid.UUID]bool // the sessions given no network
	sessions                map[uuid.UUID]*egressSession
	opened, drained, closed []egressapi.Identity
	requests                []string // each request's Host and URL
}

type egressSession struct {
	dir     string
	srv     *http.Server
	summary egressapi.Summary
}

// caBundle is what the stand-in's CA bundle holds.
const caBundle = "-----BEGIN CERTIFICATE-----\ntest egress CA\n-----END CERTIFICATE-----\n"

// newTestEgress returns a testEgress giving network to every session but
// those [testEgress.offline] names. Call it before newDriver, so that the
// Driver stops first.
func newTestEgress(t testing.TB) *testEgress {
	t.Helper()
	// Under /tmp, not in the test's own directory, which the sandbox user
	// cannot reach when the tests run as root; and short, for the
	// sockets' paths.
	root, err := os.MkdirTemp("", "egress-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	e := &testEgress{root: root, stop: make(chan struct{}), noNetwork: map[uuid.UUID]bool{}, sessions: map[uuid.UUID]*egressSession{}}
	t.Cleanup(func() {
		close(e.stop)
		e.mu.Lock()
		for _, s := range e.sessions {
			s.srv.Close()
		}
		e.mu.Unlock()
		e.wg.Wait()
		os.RemoveAll(root)
	})
	return e
}

// offline has the egress give session no network, and returns it.
func (e *testEgress) offline(session uuid.UUID) uuid.UUID {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.noNetwork[session] = true
	return session
}

// fail sets the errors Open and Drain return (nil: none).
func (e *testEgress) fail(open, drain error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.openErr, e.drainErr = open, drain
}

func (e *testEgress) Open(ctx context.Context, id egressapi.Identity) (egressapi.Reply, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.opened = append(e.opened, id)
	if e.openErr != nil {
		return egressapi.Reply{}, e.openErr
	}
	if e.noNetwork[id.Session] {
		return egressapi.Reply{}, nil
	}
	if s := e.sessions[id.Session]; s != nil {
		return egressapi.Reply{Network: true, Dir: s.dir}, nil
	}
	s := &egressSession{dir: filepath.Join(e.root, id.Session.String())}
	if err := os.Mkdir(s.dir, 0o755); err != nil {
		return egressapi.Reply{}, err
	}
	if err := os.WriteFile(filepath.Join(s.dir, egressapi.CABundleName), []byte(caBundle), 0o644); err != nil {
		return egressapi.Reply{}, err
	}
	socket := filepath.Join(s.dir, egressapi.SocketName)
	ln, err := net.Listen("unix", socket)
	if err != nil {
		return egressapi.Reply{}, err
	}
	if err := os.Chmod(socket, 0o666); err != nil { // the sandbox user connects
		ln.Close()
		return egressapi.Reply{}, err
	}
	s.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { e.serve(s, w, r) })}
	e.sessions[id.Session] = s
	e.wg.Go(func() { _ = s.srv.Serve(ln) })
	return egressapi.Reply{Network: true, Dir: s.dir}, nil
}

// serve answers one request the sandbox of s sent.
func (e *testEgress) serve(s *egressSession, w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	e.requests = append(e.requests, r.Host+" "+r.URL.String())
	host := r.URL.Hostname()
	switch host {
	case "refused.test":
		s.summary.Refused = append(s.summary.Refused, egressapi.Refusal{Scheme: "http", Host: host, Port: 80, Method: r.Method,
			Path: r.URL.Path, Rule: "no-refused", Reason: "refused.test is not allowed", Count: 1})
	default:
		s.summary.Requests = append(s.summary.Requests, egressapi.Traffic{Scheme: "http", Host: host, Port: 80, Method: r.Method,
			Status: http.StatusOK, Count: 1, Paths: []string{r.URL.Path}})
	}
	e.mu.Unlock()
	switch host {
	case "refused.test":
		http.Error(w, "refused", http.StatusForbidden)
	case "echo.test", "hold.test":
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		if host == "echo.test" {
			echo(conn, rw.Reader)
			return
		}
		io.WriteString(conn, "held\n")
		<-e.stop
	default:
		io.WriteString(w, "hello via egress\n")
	}
}

// echo reads what follows the request until the client closes its
// writing side, then answers it.
func echo(conn net.Conn, br *bufio.Reader) {
	got, _ := io.ReadAll(br)
	conn.Write(append([]byte("got: "), got...))
}

func (e *testEgress) Drain(ctx context.Context, id egressapi.Identity) (*egressapi.Summary, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.drained = append(e.drained, id)
	if e.drainErr != nil {
		return nil, e.drainErr
	}
	s := e.sessions[id.Session]
	if s == nil {
		return nil, nil
	}
	sum := s.summary
	s.summary = egressapi.Summary{}
	return &sum, nil
}

func (e *testEgress) Close(ctx context.Context, id egressapi.Identity) error {
	e.mu.Lock()
	s := e.sessions[id.Session]
	delete(e.sessions, id.Session)
	e.closed = append(e.closed, id)
	e.mu.Unlock()
	if s != nil {
		s.srv.Close()
		return os.RemoveAll(s.dir)
	}
	return nil
}

// dir returns the directory of a session, "" if it has none.
func (e *testEgress) dir(session uuid.UUID) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s := e.sessions[session]; s != nil {
		return s.dir
	}
	return ""
}

// served returns the Host and URL of each request served so far.
func (e *testEgress) served() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.requests)
}

// calls returns the identities the egress was opened, drained and closed
// for so far.
func (e *testEgress) calls() (opened, drained, closed []egressapi.Identity) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.opened), slices.Clone(e.drained), slices.Clone(e.closed)
}

// sessionsOf returns the sessions ids names.
func sessionsOf(ids []egressapi.Identity) []uuid.UUID {
	var out []uuid.UUID
	for _, id := range ids {
		out = append(out, id.Session)
	}
	return out
}

// logBuffer is a logger's output, safe for concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// newEgressDriver returns a Driver whose egress is e, logging to the
// returned buffer.
func newEgressDriver(t testing.TB, e *testEgress, cfg Config) (*Driver, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	cfg.Egress = e
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	return newDriver(t, cfg), logs
}

var errEgressDown = errors.New("egress service down")
