package sandbox

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/egressapi"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/tool"
)

// sockets counts the sockets process pid holds.
func sockets(pid int) (int, error) {
	fds, err := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink(fd); err == nil && strings.HasPrefix(target, "socket:") {
			n++
		}
	}
	return n, nil
}

// The relay serves many connections, one after another and at once, and
// holds none past the call they came from, even those the far end keeps
// open; it serves the calls after.
func TestRelayManyConnections(t *testing.T) {
	t.Parallel()
	e := newTestEgress(t)
	d, _ := newEgressDriver(t, e, Config{IdleTimeout: time.Hour})
	session := uuid.New()
	bash(t, d, session, "true")
	_, executor := sandboxPids(t, d, session)
	// Its listener alone.
	onlyListener := func() error {
		if n, err := sockets(executor); err != nil || n != 1 {
			return fmt.Errorf("the executor holds %d sockets (%v), want 1", n, err)
		}
		return nil
	}
	if err := onlyListener(); err != nil {
		t.Fatal(err)
	}

	res := bash(t, d, session, `for i in $(seq 300); do curl -sS http://example.test/s$i; done | grep -c 'hello via egress'
{ for i in $(seq 50); do curl -sS http://example.test/p$i & done; wait; } | grep -c 'hello via egress'
for i in $(seq 20); do
	exec {fd}<>/dev/tcp/127.0.0.1/3128
	printf 'GET http://hold.test/ HTTP/1.1\r\nHost: hold.test\r\n\r\n' >&$fd
	read -r line <&$fd && echo "$line"
done | grep -c held`)
	if res.IsError || res.Output != "300\n50\n20\n" {
		t.Errorf("result = %+v, want 300, 50 and 20 answers", res)
	}
	natstest.WaitFor(t, 5*time.Second, onlyListener)
	if res := bash(t, d, session, "curl -sS http://example.test/after"); res.Output != "hello via egress\n" {
		t.Errorf("the next call = %+v, want it served", res)
	}
}

// Each way's end passes through the relay as a half-close: a client that
// has sent all it will still reads the answer.
func TestRelayHalfClose(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no python3")
	}
	e := newTestEgress(t)
	d, _ := newEgressDriver(t, e, Config{})
	res := bash(t, d, uuid.New(), `python3 -c 'import socket
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(b"GET http://echo.test/ HTTP/1.1\r\nHost: echo.test\r\n\r\nping")
s.shutdown(socket.SHUT_WR)
print(s.makefile("rb").read().decode())'`)
	if res.IsError || res.Output != "got: ping\n" {
		t.Errorf("result = %+v, want the echo of what was sent before the half-close", res)
	}
}

// relayClientEnv tells TestRelayClientHelper the way to the egress
// service ("relay" or "direct") and how many requests to make, as
// "<way>:<n>".
const relayClientEnv = "CORRAL_SANDBOX_TEST_RELAY_CLIENT"

// TestRelayClientHelper runs inside a sandbox with network, for
// BenchmarkEgressRelay: it makes requests one after another, each on a
// connection of its own, through the relay or straight to the egress
// socket, and prints how long one took on average.
func TestRelayClientHelper(t *testing.T) {
	way, count, ok := strings.Cut(os.Getenv(relayClientEnv), ":")
	if !ok {
		t.Skip("run by BenchmarkEgressRelay")
	}
	n, err := strconv.Atoi(count)
	if err != nil {
		t.Fatal(err)
	}
	network, addr := "tcp", fmt.Sprintf("127.0.0.1:%d", egressapi.ProxyPort)
	if way == "direct" {
		network, addr = "unix", egressapi.SandboxDir+"/"+egressapi.SocketName
	}
	req := []byte("GET http://example.test/x HTTP/1.1\r\nHost: example.test\r\nConnection: close\r\n\r\n")
	start := time.Now()
	for range n {
		c, err := net.Dial(network, addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(req); err != nil {
			t.Fatal(err)
		}
		resp, err := io.ReadAll(c)
		c.Close()
		if err != nil || !strings.Contains(string(resp), "hello via egress") {
			t.Fatalf("response %q, %v", resp, err)
		}
	}
	fmt.Printf("ns/request %d\n", time.Since(start).Nanoseconds()/int64(n))
}

// BenchmarkEgressRelay times a request to the egress service from inside
// a sandbox, each on a new connection: through the relay on the proxy
// port, as programs make them, and straight to the egress socket. The
// difference is what the relay adds. A client inside the sandbox (this
// test binary, as TestRelayClientHelper) times them, since the proxy port
// is on the sandbox's own loopback; ns/op is its mean. Not under -race,
// whose binaries cannot start within the sandbox's address space limit.
func BenchmarkEgressRelay(b *testing.B) {
	e := newTestEgress(b)
	d, _ := newEgressDriver(b, e, Config{IdleTimeout: time.Hour})
	session := uuid.New()
	for _, way := range []string{"direct", "relay"} {
		b.Run(way, func(b *testing.B) {
			command := fmt.Sprintf("%s=%s:%d %s -test.run='^TestRelayClientHelper$' -test.count=1", relayClientEnv, way, b.N, executorPath)
			res, err := d.Run(b.Context(), who(tenant, session), &tool.BashArgs{Command: command})
			var ns float64
			if err == nil {
				_, err = fmt.Sscanf(res.Output, "ns/request %g", &ns)
			}
			if err == nil && res.IsError {
				err = errors.New("the client failed")
			}
			if err != nil {
				b.Fatalf("%v: %s", err, res.Output)
			}
			b.ReportMetric(ns, "ns/op")
		})
	}
}
