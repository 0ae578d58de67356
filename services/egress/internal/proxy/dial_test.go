package proxy

import (
	"context"
	"errors"
	"net"
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
		{"8.8.8.8", false},
		{"140.82.112.3", false},
		{"2606:4700::1111", false},
		{"::ffff:8.8.8.8", false},
	} {
		if got := internal(netip.MustParseAddr(tc.addr)); got != tc.want {
			t.Errorf("internal(%s) = %v, want %v", tc.addr, got, tc.want)
		}
	}
}

func TestDialRefusesInternal(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	ctx := context.Background()

	d := newDialer(Config{})
	for _, host := range []string{"localhost", "127.0.0.1", "LOCALHOST."} {
		if c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, port)); !errors.Is(err, errInternal) {
			if c != nil {
				c.Close()
			}
			t.Errorf("dial %s: got %v, want it refused as internal", host, err)
		}
	}

	for _, d := range []*dialer{
		newDialer(Config{AllowPrivate: true}),
		newDialer(Config{Resolve: map[string]string{"localhost": l.Addr().String()}}),
	} {
		c, err := d.DialContext(ctx, "tcp", net.JoinHostPort("localhost", port))
		if err != nil {
			t.Errorf("dial with %+v: %v", d, err)
			continue
		}
		c.Close()
	}
}
