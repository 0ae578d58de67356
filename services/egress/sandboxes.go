package egress

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/egressapi"
)

// The layout of the service's directory:
//
//	Dir/control.sock     the control socket (0600: the sandbox-manager's)
//	Dir/ca.pem, ca-key.pem  the CA, unless configured elsewhere
//	Dir/s/               0711: no one may list it
//	Dir/s/<random>/      one per sandbox with network, bound into it:
//	    egress.sock      its socket: every connection speaks for it
//	    ca.pem           the CA bundle it trusts
//	Dir/r/<random>.json  0700: whom each sandbox's socket speaks for
//
// A sandbox's directory name is random and unlistable, so that no one on
// the node finds another session's socket; and only its own is bound into
// a sandbox.
const (
	controlName = "control.sock"
	socketsDir  = "s"
	registryDir = "r"
)

// sandboxes serves each sandbox's socket with the proxy, and remembers
// them on disk, so that a restarted service serves them again at the same
// paths, which live sandboxes have bound.
type sandboxes struct {
	dir    string
	bundle []byte // the CA bundle every sandbox trusts
	serve  func(ctx context.Context, l net.Listener, id egressapi.Identity) error
	// restored, if set, is told of each sandbox served again after a
	// restart, before its socket is.
	restored func(ctx context.Context, id egressapi.Identity)

	mu   sync.Mutex
	ctx  context.Context
	wg   sync.WaitGroup
	open map[sessionKey]*sandbox
}

type sandbox struct {
	name   string
	id     egressapi.Identity
	l      *countingListener
	cancel context.CancelFunc // ends its connections
	done   chan struct{}
}

// record is a sandbox's entry in Dir/r.
type record struct {
	Name     string             `json:"name"`
	Identity egressapi.Identity `json:"identity"`
}

var names = base32.StdEncoding.WithPadding(base32.NoPadding)

// restore serves again every sandbox the registry holds, until ctx ends.
func (b *sandboxes) restore(ctx context.Context) error {
	b.ctx = ctx
	for _, d := range []struct {
		name string
		mode os.FileMode
	}{{socketsDir, 0o711}, {registryDir, 0o700}} {
		p := filepath.Join(b.dir, d.name)
		if err := os.MkdirAll(p, d.mode); err != nil {
			return err
		}
		if err := os.Chmod(p, d.mode); err != nil {
			return err
		}
	}
	entries, err := os.ReadDir(filepath.Join(b.dir, registryDir))
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(b.dir, registryDir, e.Name()))
		if err != nil {
			return err
		}
		var r record
		if err := json.Unmarshal(data, &r); err != nil || r.Name == "" || strings.ContainsAny(r.Name, "/.") {
			continue
		}
		if b.restored != nil {
			b.restored(ctx, r.Identity)
		}
		if err := b.listen(r.Name, r.Identity); err != nil {
			return err
		}
	}
	return nil
}

// openSandbox returns the directory of the session's sandbox, serving its
// socket with id (as given last) from now on.
func (b *sandboxes) openSandbox(id egressapi.Identity) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ctx == nil || b.ctx.Err() != nil {
		return "", errors.New("egress is not serving")
	}
	k := sessionKey{id.Tenant, id.Session}
	if s := b.open[k]; s != nil {
		if s.id.Equal(id) {
			return filepath.Join(b.dir, socketsDir, s.name), nil
		}
		b.stop(s)
		delete(b.open, k)
		if err := b.listen(s.name, id); err != nil {
			return "", err
		}
		return filepath.Join(b.dir, socketsDir, s.name), b.remember(s.name, id)
	}
	raw := make([]byte, 10)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	name := strings.ToLower(names.EncodeToString(raw))
	dir := filepath.Join(b.dir, socketsDir, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	if err := b.remember(name, id); err != nil {
		return "", err
	}
	return dir, b.listen(name, id)
}

func (b *sandboxes) remember(name string, id egressapi.Identity) error {
	data, _ := json.Marshal(record{Name: name, Identity: id})
	tmp := filepath.Join(b.dir, registryDir, name+".tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(b.dir, registryDir, name+".json"))
}

// listen serves the socket of sandbox name as id. b.mu is held.
func (b *sandboxes) listen(name string, id egressapi.Identity) error {
	dir := filepath.Join(b.dir, socketsDir, name)
	if err := os.WriteFile(filepath.Join(dir, egressapi.CABundleName), b.bundle, 0o644); err != nil {
		return fmt.Errorf("sandbox %s: %w", name, err)
	}
	path := filepath.Join(dir, egressapi.SocketName)
	_ = os.Remove(path) // left by a service that stopped
	l, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("sandbox %s: %w", name, err)
	}
	// The sandbox is another user on the host when the manager runs as
	// root: it must be able to connect. The directory's name is its
	// only key.
	if err := os.Chmod(path, 0o666); err != nil {
		l.Close()
		return err
	}
	ctx, cancel := context.WithCancel(b.ctx)
	cl := &countingListener{Listener: l, idle: make(chan struct{})}
	close(cl.idle)
	s := &sandbox{name: name, id: id, l: cl, cancel: cancel, done: make(chan struct{})}
	if b.open == nil {
		b.open = make(map[sessionKey]*sandbox)
	}
	b.open[sessionKey{id.Tenant, id.Session}] = s
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer close(s.done)
		_ = b.serve(ctx, cl, id)
	}()
	return nil
}

// stop stops serving s, ends its connections and waits for them. b.mu
// is held.
func (b *sandboxes) stop(s *sandbox) {
	s.cancel()
	s.l.Close()
	<-s.done
}

// closeSandbox stops serving the session's sandbox and removes its
// directory; closing one that is not open does nothing.
func (b *sandboxes) closeSandbox(tenant string, session uuid.UUID) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := sessionKey{tenant, session}
	s := b.open[k]
	if s == nil {
		return nil
	}
	b.stop(s)
	delete(b.open, k)
	if err := os.Remove(filepath.Join(b.dir, registryDir, s.name+".json")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.RemoveAll(filepath.Join(b.dir, socketsDir, s.name))
}

// settle waits, for at most max, until the session's sandbox has no
// connection open, so that what they did is all recorded: its executor
// closes them at the end of each call, just before the sandbox-manager
// drains the call's summary.
func (b *sandboxes) settle(tenant string, session uuid.UUID, max time.Duration) {
	b.mu.Lock()
	s := b.open[sessionKey{tenant, session}]
	b.mu.Unlock()
	if s == nil {
		return
	}
	select {
	case <-s.l.idleNow():
	case <-time.After(max):
	}
}

// countingListener counts the connections it accepted that are still
// open.
type countingListener struct {
	net.Listener
	mu   sync.Mutex
	open int
	idle chan struct{} // closed while open is 0
}

func (l *countingListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		full := l.open >= maxSandboxConns
		l.mu.Unlock()
		if !full {
			return l.counted(c), nil
		}
		// One sandbox does not take the node's proxy for itself.
		c.Close()
	}
}

// maxSandboxConns is how many connections one sandbox may have open to
// egress at once.
const maxSandboxConns = 256

func (l *countingListener) counted(c net.Conn) net.Conn {
	l.mu.Lock()
	if l.open == 0 {
		l.idle = make(chan struct{})
	}
	l.open++
	l.mu.Unlock()
	return &countedConn{Conn: c, l: l}
}

// idleNow returns a channel closed once no connection is open.
func (l *countingListener) idleNow() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.idle
}

func (l *countingListener) closed() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open--; l.open == 0 {
		close(l.idle)
	}
}

// countedConn tells its listener when it is closed, once.
type countedConn struct {
	net.Conn
	l    *countingListener
	once sync.Once
}

// NetConn returns the connection c wraps, for copies the kernel can
// splice.
func (c *countedConn) NetConn() net.Conn { return c.Conn }

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.l.closed)
	return err
}

// wait waits, once ctx has ended, for every socket's server to stop.
func (b *sandboxes) wait() {
	b.mu.Lock()
	for _, s := range b.open {
		s.l.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}
