package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"

	"corral.dev/pkg/egressapi"
)

// DefaultMaxHeldBody is [Config.MaxHeldBody] when it is 0.
const DefaultMaxHeldBody = 32 << 20

// Config configures a [Proxy].
type Config struct {
	// CA signs the certificates the proxy presents where it terminates
	// TLS: the CA's certificate (with Leaf set) and key, as [NewCA] and
	// [LoadOrCreateCA] return them.
	CA tls.Certificate
	// RootCAs verify the upstreams' certificates; nil means the system's.
	RootCAs *x509.CertPool
	// Resolve maps hosts (lowercase) to the address ("ip:port") to dial
	// for them, internal or not, whatever port was asked for. It is for
	// tests.
	Resolve map[string]string
	// AllowPrivate lets the proxy dial internal addresses (loopback,
	// private, link-local and the like).
	AllowPrivate bool
	// MaxHeldBody bounds the body of a request held for approval, which
	// is read whole to hash it (a git push's pack is not); 0 means
	// [DefaultMaxHeldBody].
	MaxHeldBody int64
	// Logger logs the proxy's work; nil discards it.
	Logger *slog.Logger
}

// heldInFlight is how many held requests' bodies a proxy reads at once.
const heldInFlight = 8

// Proxy is the egress HTTP forward proxy. Its methods are safe for
// concurrent use; one Proxy serves every sandbox of a node.
type Proxy struct {
	judge   Judge
	creds   Credentials
	holder  Holder
	rec     Recorder
	log     *slog.Logger
	errLog  *log.Logger // for net/http's own complaints
	maxHeld int64
	// heldBytes bounds the bodies held in memory at once, all sandboxes
	// together: heldInFlight times maxHeld.
	heldBytes *semaphore.Weighted

	dialer    *dialer
	transport *http.Transport
	leaves    *leaves
	tls       *tls.Config // for the clients whose TLS it terminates
	buffers   *bufferPool
}

// New makes a proxy that asks j about every CONNECT and request, c for
// the credentials to inject, h about requests held for approval and
// tells r what went out. c, h and r may be nil: a proxy without
// credentials injects none, one without a holder refuses what needs
// approval, one without a recorder records nothing.
func New(cfg Config, j Judge, c Credentials, h Holder, r Recorder) *Proxy {
	p := &Proxy{
		judge:   j,
		creds:   c,
		holder:  h,
		rec:     r,
		log:     cfg.Logger,
		maxHeld: cfg.MaxHeldBody,
		dialer:  newDialer(cfg),
		leaves:  newLeaves(cfg.CA),
		buffers: newBufferPool(),
	}
	if p.creds == nil {
		p.creds = noCredentials{}
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.errLog = slog.NewLogLogger(p.log.Handler(), slog.LevelWarn)
	if p.maxHeld <= 0 {
		p.maxHeld = DefaultMaxHeldBody
	}
	p.heldBytes = semaphore.NewWeighted(heldInFlight * p.maxHeld)
	p.transport = newTransport(p.dialer, cfg.RootCAs)
	p.tls = p.interceptTLS()
	return p
}

// Serve accepts connections on l, each speaking for id, until l is closed
// or ctx ends, and returns once every connection it accepted has ended;
// it closes l. When l is closed, Serve lets the requests in progress
// finish and closes idle connections; when ctx ends it closes every
// connection at once. It returns nil when it stopped for either reason,
// and l's error otherwise.
func (p *Proxy) Serve(ctx context.Context, l net.Listener, id egressapi.Identity) error {
	s := &session{p: p, id: id, inner: newConnQueue(l.Addr()), hijacked: make(map[net.Conn]struct{})}
	srv := &http.Server{
		Handler:           s,
		ConnState:         s.connState,
		ConnContext:       interceptContext,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          p.errLog,
	}
	closeAll := func() {
		srv.Close()
		s.closeHijacked()
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		select {
		case <-ctx.Done():
			l.Close()
			s.inner.Close()
			closeAll()
		case <-stop:
		}
	})
	innerDone := make(chan struct{})
	wg.Go(func() {
		defer close(innerDone)
		srv.Serve(s.inner) // returns when the queue is closed
	})
	err := srv.Serve(l)
	s.inner.Close()
	<-innerDone
	// No connection is accepted any more; those accepted while ctx ended
	// may have escaped closeAll, which is why it runs again here.
	if ctx.Err() == nil {
		srv.Shutdown(ctx) // closes idle connections, waits for busy ones, or until ctx ends
	}
	if ctx.Err() != nil {
		closeAll()
	}
	s.conns.Wait()
	close(stop)
	wg.Wait()
	if errors.Is(err, http.ErrServerClosed) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return fmt.Errorf("serve egress proxy: %w", err)
}

// session is one [Proxy.Serve]: a sandbox's connections.
type session struct {
	p     *Proxy
	id    egressapi.Identity
	inner *connQueue // intercepted connections, once their TLS is terminated

	// conns counts the connections the server owns and the handlers
	// running, which own the connections they hijacked.
	conns sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	hijacked map[net.Conn]struct{}
}

func (s *session) connState(_ net.Conn, st http.ConnState) {
	switch st {
	case http.StateNew:
		s.conns.Add(1)
	case http.StateClosed, http.StateHijacked:
		s.conns.Done()
	}
}

// ServeHTTP handles what a sandbox sends: a CONNECT, an absolute-form
// request, or a request read inside an intercepted CONNECT.
func (s *session) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.conns.Add(1) // the connection is counted until the handler hijacks it
	defer s.conns.Done()
	if c, ok := r.Context().Value(interceptKey{}).(*intercepted); ok {
		s.serveIntercepted(w, r, c)
		return
	}
	switch {
	case r.Method == http.MethodConnect:
		s.serveConnect(w, r)
	case r.URL.IsAbs():
		s.servePlain(w, r)
	default:
		http.Error(w, "corral egress: this is an HTTP proxy: send CONNECT or absolute-form requests", http.StatusBadRequest)
	}
}

// track registers a hijacked connection, to be closed when the session
// ends. It returns false, having closed c, when the session has ended.
func (s *session) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return false
	}
	s.hijacked[c] = struct{}{}
	return true
}

// untrack forgets a connection given to track.
func (s *session) untrack(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.hijacked, c)
}

// closeHijacked closes the hijacked connections, and those hijacked
// from now on.
func (s *session) closeHijacked() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for c := range s.hijacked {
		c.Close()
	}
}

// record tells the recorder of e.
func (s *session) record(ctx context.Context, e Entry) {
	s.p.log.DebugContext(ctx, "egress", "tenant", s.id.Tenant, "session", s.id.Session, "scheme", e.Scheme, "host", e.Host,
		"port", e.Port, "method", e.Method, "path", e.Path, "status", e.Status, "refused", e.Refused,
		"rule", e.Verdict.Rule, "reason", e.Reason, "sent", e.Sent, "received", e.Received)
	if s.p.rec != nil {
		s.p.rec.Record(s.id, e)
	}
}
