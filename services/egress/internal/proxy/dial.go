package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"corral.dev/pkg/netaddr"
)

// errInternal marks a dial refused because the host's addresses are the
// node's own network's.
var errInternal = errors.New("egress never reaches internal addresses")

// internal reports whether a is an address of the node's own network
// rather than the Internet's (see [netaddr.Internal]).
func internal(a netip.Addr) bool { return netaddr.Internal(a) }

// dialer dials upstreams with the proxy's own name resolution.
type dialer struct {
	net          net.Dialer
	resolver     *net.Resolver
	resolve      map[string]string
	allowPrivate bool
}

// DialContext connects to address ("host:port") over TCP. A host in
// resolve is dialled at the address given there; any other is resolved
// and dialled at its first address that answers, never at an internal
// one (unless allowPrivate). The error wraps errInternal when every
// address of the host is internal.
func (d *dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if a, ok := d.resolve[host]; ok {
		return d.net.DialContext(ctx, "tcp", a)
	}
	addrs, err := d.lookup(ctx, host)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, a := range addrs {
		c, err := d.net.DialContext(ctx, "tcp", net.JoinHostPort(a.String(), port))
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// lookup resolves host (or parses it, when an IP address) and drops the
// internal addresses unless they are allowed.
func (d *dialer) lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		addrs, err = d.resolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, err
		}
	}
	if d.allowPrivate {
		return addrs, nil
	}
	external := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if !internal(a) {
			external = append(external, a.Unmap())
		}
	}
	if len(external) == 0 {
		return nil, fmt.Errorf("%s is at %v: %w", host, addrs, errInternal)
	}
	return external, nil
}

// newDialer makes the dialer of cfg.
func newDialer(cfg Config) *dialer {
	return &dialer{
		net:          net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second},
		resolver:     &net.Resolver{},
		resolve:      cfg.Resolve,
		allowPrivate: cfg.AllowPrivate,
	}
}
