package gateway

import (
	"crypto/sha256"
	"errors"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// A sign-in the server refuses costs a NATS connection and the auth
// service's look-up. Without a bound, anyone who can reach the API could
// make the gateway pay that at the rate it sends requests, with keys made
// up or one key guessed at. The gate bounds it twice: a key refused is
// refused again without asking for a while, and a client address whose
// sign-ins keep failing waits before it may try another. The address's
// wait holds back no key the server took lately: behind a proxy or a
// NAT, many clients share an address, and one of them guessing keys must
// not lock the others out.

// errSignInRate: the client's address has had too many refused sign-ins.
var errSignInRate = errors.New("too many refused API keys from this address: wait a minute and try again with a key corral credentials issue printed")

// Bounds of the gate.
const (
	// refusalTTL is how long a refused key is refused without asking:
	// short, so that a key issued a moment before it was first tried
	// (and refused while the auth service had not seen it) works soon.
	refusalTTL = 10 * time.Second
	// failBurst refused sign-ins an address may have at once, then one
	// each failEvery.
	failBurst = 10
	failEvery = 6 * time.Second
	// trustedFor is how long a key the server took may sign in again
	// from an address that is waiting.
	trustedFor = time.Hour
	// maxGated bounds the keys and addresses the gate remembers: past it,
	// the oldest are forgotten first, so that no flood of new ones grows
	// the gateway's memory.
	maxGated = 1 << 16
)

// signInGate remembers the keys the server refused and those it took
// lately (by the hash of the key, never the key), and the refused
// sign-ins of each client address.
type signInGate struct {
	mu      sync.Mutex
	refused map[[sha256.Size]byte]time.Time // until when
	taken   map[[sha256.Size]byte]time.Time // until when
	byAddr  map[string]*rate.Limiter
	now     func() time.Time
}

func newSignInGate() *signInGate {
	return &signInGate{
		refused: make(map[[sha256.Size]byte]time.Time), taken: make(map[[sha256.Size]byte]time.Time),
		byAddr: make(map[string]*rate.Limiter), now: time.Now,
	}
}

// check returns why a sign-in of the key hashed h, from addr, is refused
// without asking the server, or nil when it may be tried.
func (g *signInGate) check(h [sha256.Size]byte, addr string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	if until, ok := g.refused[h]; ok {
		if now.Before(until) {
			return errKeyRefused
		}
		delete(g.refused, h)
	}
	if until, ok := g.taken[h]; ok && now.Before(until) {
		return nil
	}
	if l := g.byAddr[addr]; l != nil && l.TokensAt(now) < 1 {
		return errSignInRate
	}
	return nil
}

// succeeded notes that the server took the key hashed h.
func (g *signInGate) succeeded(h [sha256.Size]byte) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	if len(g.taken) >= maxGated {
		g.forget(now)
	}
	g.taken[h] = now.Add(trustedFor)
}

// failed notes that the server refused the key hashed h, tried from addr.
func (g *signInGate) failed(h [sha256.Size]byte, addr string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	if len(g.refused) >= maxGated {
		g.forget(now)
	}
	g.refused[h] = now.Add(refusalTTL)
	delete(g.taken, h) // revoked since
	l := g.byAddr[addr]
	if l == nil {
		if len(g.byAddr) >= maxGated {
			g.forget(now)
		}
		l = rate.NewLimiter(rate.Every(failEvery), failBurst)
		g.byAddr[addr] = l
	}
	l.AllowN(now, 1)
}

// sweep forgets what no longer counts: refusals and taken keys past their
// time, and addresses whose allowance is whole again.
func (g *signInGate) sweep() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.forget(g.now())
}

// forget is sweep with g.mu held; when nothing is past its time and the
// gate is full, it forgets everything (a flood the bounds cannot hold
// otherwise: the per-address limit starts over, the server still refuses).
func (g *signInGate) forget(now time.Time) {
	for h, until := range g.refused {
		if !now.Before(until) {
			delete(g.refused, h)
		}
	}
	for h, until := range g.taken {
		if !now.Before(until) {
			delete(g.taken, h)
		}
	}
	for addr, l := range g.byAddr {
		if l.TokensAt(now) >= failBurst {
			delete(g.byAddr, addr)
		}
	}
	if len(g.refused) >= maxGated {
		clear(g.refused)
	}
	if len(g.taken) >= maxGated {
		clear(g.taken)
	}
	if len(g.byAddr) >= maxGated {
		clear(g.byAddr)
	}
}

// clientAddr is where a request came from, as its connection says (not a
// header, which the client writes): its IP address, or for IPv6 its /64,
// which one client commonly holds whole.
func clientAddr(r *http.Request) string {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	a := ap.Addr().Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}
