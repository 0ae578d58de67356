package gateway

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
	"corral.dev/pkg/sessionlog"
)

// An API key is a Corral client credential, "<ID>:<secret>" (corral
// credentials issue prints it). The gateway does what a key asks signed in
// to NATS as that credential, through the auth service like any client:
// the server checks the secret and gives the connection the credential's
// permissions, which name its tenant alone. Whatever the gateway asks for
// a request, it asks on that connection, so a key reads and acts on its
// own tenant only, even where the gateway got a subject wrong.

// Why a key is refused.
var (
	// errKeyFormat: the key is not <ID>:<secret>.
	errKeyFormat = errors.New("the API key is not a Corral credential: want ID:SECRET as corral credentials issue prints it")
	// errKeyRefused: the server refused the sign-in (unknown, revoked,
	// wrong secret).
	errKeyRefused = errors.New("the API key was refused: unknown, revoked, or a wrong secret")
	// errTooManyKeys: the gateway holds as many connections as it may.
	errTooManyKeys = errors.New("the gateway holds as many clients' connections as it may (CORRAL_GATEWAY_MAX_KEYS); try again shortly")
)

// client is the connection of one API key: signed in as its credential.
type client struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	cred credential.Credential
	logs *sessionlog.Log

	// Guarded by clients.mu.
	ready chan struct{} // closed once connected, or failed (err)
	err   error
	refs  int
	last  time.Time
}

// clients are the connections of the API keys in use, by the SHA-256 of
// the whole key: a wrong secret never finds another's connection, it
// signs in afresh and is refused.
type clients struct {
	url  string
	opts []nats.Option
	log  *slog.Logger
	idle time.Duration
	max  int

	mu    sync.Mutex
	conns map[[sha256.Size]byte]*client
	// gate refuses, without asking the server, what it refused a moment
	// ago, and addresses whose sign-ins keep failing.
	gate *signInGate
}

func newClients(url string, opts []nats.Option, log *slog.Logger, idle time.Duration, maxKeys int) *clients {
	return &clients{url: url, opts: opts, log: log, idle: idle, max: maxKeys, conns: make(map[[sha256.Size]byte]*client), gate: newSignInGate()}
}

// acquire returns the connection of key, signing in with it if none is
// open, and the function that releases it once the request is done. addr
// is the client's address, charged for a sign-in the server refuses.
func (cs *clients) acquire(ctx context.Context, key, addr string) (*client, func(), error) {
	id, secret, ok := strings.Cut(strings.TrimSpace(key), ":")
	if !ok || !credential.IsID(id) || secret == "" {
		return nil, nil, errKeyFormat
	}
	// The hash of the key as it signs in, not as it was sent: spaces
	// around it would otherwise make one key as many connections as
	// there are ways to pad it, and take every slot of MaxKeys.
	h := sha256.Sum256([]byte(id + ":" + secret))
	cs.mu.Lock()
	c, found := cs.conns[h]
	if found && c.nc != nil && !c.nc.IsConnected() {
		// Cut (as a revoked credential's connection is), or trying to
		// sign in again: a new sign-in says at once whether the key
		// still works. What the old one still carries fails with it.
		delete(cs.conns, h)
		found = false
		defer c.nc.Close()
	}
	if !found {
		if err := cs.gate.check(h, addr); err != nil {
			cs.mu.Unlock()
			return nil, nil, err
		}
		if len(cs.conns) >= cs.max {
			cs.mu.Unlock()
			return nil, nil, errTooManyKeys
		}
		c = &client{ready: make(chan struct{})}
		cs.conns[h] = c
	}
	c.refs++
	cs.mu.Unlock()
	if !found {
		// Signed in by the first request of the key; the others wait
		// for it. Bounded by the connection's and Whoami's time-outs.
		cs.connect(c, h, id, secret, addr)
	}
	release := func() {
		cs.mu.Lock()
		c.refs--
		c.last = time.Now()
		cs.mu.Unlock()
	}
	select {
	case <-c.ready:
	case <-ctx.Done():
		release()
		return nil, nil, ctx.Err()
	}
	if c.err != nil {
		release()
		return nil, nil, c.err
	}
	return c, release, nil
}

// connect signs in as credential id, and learns from the server what the
// credential is.
func (cs *clients) connect(c *client, h [sha256.Size]byte, id, secret, addr string) {
	var nc *nats.Conn
	var js jetstream.JetStream
	var cred credential.Credential
	err := func() error {
		opts := append([]nats.Option{bus.SignIn(id, secret), nats.Timeout(5 * time.Second)}, cs.opts...)
		var err error
		nc, err = bus.Connect(cs.url, "gateway "+id, cs.log, opts...)
		if errors.Is(err, nats.ErrAuthorization) {
			return errKeyRefused
		}
		if err != nil {
			return fmt.Errorf("connect to nats: %w", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if cred, err = credential.Whoami(ctx, nc); err != nil {
			nc.Close()
			return err
		}
		if js, err = jetstream.New(nc); err != nil {
			nc.Close()
			return err
		}
		return nil
	}()
	cs.mu.Lock()
	defer cs.mu.Unlock()
	c.err, c.last = err, time.Now()
	if err == nil {
		c.nc, c.js, c.cred = nc, js, cred
		c.logs = sessionlog.New(js, sessionlog.Options{Reader: "gateway-client", Client: true, Logger: cs.log})
	} else if cs.conns[h] == c {
		// Forgotten at once: the next request signs in again.
		delete(cs.conns, h)
	}
	switch {
	case err == nil:
		cs.gate.succeeded(h)
	case errors.Is(err, errKeyRefused):
		cs.gate.failed(h, addr)
	}
	close(c.ready)
}

// sweep closes the connections unused for the idle time until ctx is
// done, then closes them all.
func (cs *clients) sweep(ctx context.Context) error {
	t := time.NewTicker(max(cs.idle/4, time.Second))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			cs.close(func(*client) bool { return true })
			return nil
		case <-t.C:
			cs.close(func(c *client) bool { return c.refs == 0 && time.Since(c.last) > cs.idle })
			cs.gate.sweep()
		}
	}
}

// close closes the connections that are ready and that drop says to drop.
func (cs *clients) close(drop func(*client) bool) {
	cs.mu.Lock()
	var closing []*nats.Conn
	for h, c := range cs.conns {
		select {
		case <-c.ready:
		default:
			continue
		}
		if c.nc != nil && drop(c) {
			closing = append(closing, c.nc)
			delete(cs.conns, h)
		}
	}
	cs.mu.Unlock()
	for _, nc := range closing {
		nc.Close()
	}
}
