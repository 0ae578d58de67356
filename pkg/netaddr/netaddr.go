// Package netaddr says which addresses are a network's own rather than the
// Internet's: what egress never dials for a sandbox and the gateway never
// posts a webhook to, so that neither can be turned on the hosts beside
// Corral (a cloud's metadata service, a cluster's services).
package netaddr

import "net/netip"

// internalPrefixes are ranges netip's predicates miss: "this network",
// carrier-grade NAT (often a cluster's or a VPN's), IETF protocol
// assignments, benchmarking, the reserved block with broadcast, and the
// IPv6 ranges that carry an IPv4 address inside (NAT64, local NAT64,
// IPv4-compatible, 6to4, Teredo) or are deprecated site-local.
var internalPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("::/96"),
	netip.MustParsePrefix("2002::/16"),
	netip.MustParsePrefix("2001::/32"),
	netip.MustParsePrefix("fec0::/10"),
}

// Internal reports whether a is not an address of the Internet: invalid,
// loopback, private, link-local, multicast, unspecified, or in one of
// the ranges above. An IPv4-mapped IPv6 address is judged as its IPv4.
func Internal(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsValid() || a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsUnspecified() {
		return true
	}
	for _, p := range internalPrefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
