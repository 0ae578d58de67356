package netaddr

import (
	"net/netip"
	"testing"
)

func TestInternal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		addr string
		want bool
	}{
		{"127.0.0.1", true},
		{"127.255.0.9", true},
		{"::1", true},
		{"10.0.0.1", true},
		{"172.16.5.4", true},
		{"192.168.1.1", true},
		{"169.254.169.254", true},
		{"fe80::1", true},
		{"fc00::1", true},
		{"0.0.0.0", true},
		{"::", true},
		{"224.0.0.1", true},
		{"ff02::1", true},
		{"100.64.0.1", true},
		{"255.255.255.255", true},
		{"::ffff:127.0.0.1", true},
		{"::ffff:10.0.0.1", true},
		{"64:ff9b::a00:1", true}, // NAT64 of 10.0.0.1
		{"64:ff9b:1::1", true},   // local NAT64
		{"::7f00:1", true},       // IPv4-compatible 127.0.0.1
		{"2002:a00:1::1", true},  // 6to4 of 10.0.0.1
		{"2001:0:4136::1", true}, // Teredo
		{"fec0::1", true},        // site-local
		{"8.8.8.8", false},
		{"140.82.112.3", false},
		{"2606:4700::1111", false},
		{"::ffff:8.8.8.8", false},
		{"2a00:1450:4001::1", false},
	} {
		if got := Internal(netip.MustParseAddr(tc.addr)); got != tc.want {
			t.Errorf("Internal(%s) = %v, want %v", tc.addr, got, tc.want)
		}
	}
	if !Internal(netip.Addr{}) {
		t.Error("an invalid address is not internal")
	}
}
