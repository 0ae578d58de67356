package natstest

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// FreePort returns a port on 127.0.0.1 that nothing listens on, for a
// server a test starts later. It lies below the kernel's ephemeral range,
// from which outgoing connections take their local ports: a port picked
// there by listening on port 0 and closing again is free for any
// connection the tests open meanwhile, and a server that then listens on
// it fails. It is picked at random, so that test binaries running side by
// side rarely try the same one, and is never NATS's default port, 4222.
func FreePort(t testing.TB) int {
	t.Helper()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	for range 1000 {
		port := 0 // where the ephemeral range leaves no room below it
		if low > 11000 {
			port = 10000 + rand.IntN(low-10000)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		port = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if port != 4222 && handOut(port) {
			return port
		}
	}
	t.Fatal("natstest: no free port")
	return 0
}

// handedOut are the ports FreePort returned in this process: a port is
// free until its server listens on it, and two tests side by side must
// not both be given it meanwhile.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: make(map[int]bool)}

// handOut reports whether port was not handed out before, and marks it.
func handOut(port int) bool {
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports[port] {
		return false
	}
	handedOut.ports[port] = true
	return true
}

// FreeAddr is [FreePort] as an address to listen on: 127.0.0.1:port.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(FreePort(t))
}
