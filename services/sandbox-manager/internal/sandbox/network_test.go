package sandbox

import (
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/egressapi"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/tool"
)

// contains checks that a command succeeded and that its output holds each
// of want.
func contains(want ...string) func(t *testing.T, res Result) {
	return func(t *testing.T, res Result) {
		t.Helper()
		if res.IsError {
			t.Errorf("command failed: %+v", res)
		}
		for _, s := range want {
			if !strings.Contains(res.Output, s) {
				t.Errorf("output lacks %q:\n%s", s, res.Output)
			}
		}
	}
}

// failsWith checks that a command failed saying why.
func failsWith(why string) func(t *testing.T, res Result) {
	return func(t *testing.T, res Result) {
		t.Helper()
		if !res.IsError || !strings.Contains(res.Output, why) {
			t.Errorf("result = %+v, want a failure saying %q", res, why)
		}
	}
}

// A session the egress service gives network reaches it, and nothing
// else, through the proxy its environment names; a session it gives none
// has nothing of it.
func TestSandboxNetwork(t *testing.T) {
	t.Parallel()
	e := newTestEgress(t)
	d, _ := newEgressDriver(t, e, Config{})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	hostURL := "http://" + ln.Addr().String() + "/"

	var env []string
	for _, kv := range egressapi.SandboxEnv() {
		env = append(env, kv[0]+"="+kv[1]+"\n")
	}
	ca := egressapi.SandboxDir + "/" + egressapi.CABundleName
	bind := `python3 -c 'import socket; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); ` +
		`s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1); s.bind(("127.0.0.1", 3128)); s.listen(); print("bound")'`

	tests := []struct {
		name    string
		network bool
		command string
		check   func(t *testing.T, res Result)
	}{
		{"curl through the relay", true, "curl -sS http://example.test/x", outputs("hello via egress\n")},
		{"environment", true, "env", contains(env...)},
		{"ca bundle", true, `echo "$SSL_CERT_FILE"; cat "$CURL_CA_BUNDLE"`, outputs(ca + "\n" + caBundle)},
		{"egress dir", true, "ls -A " + egressapi.SandboxDir, outputs("ca.pem\negress.sock\n")},
		{"egress dir read-only", true, "touch " + egressapi.SandboxDir + "/x", fails()},
		{"proxy port held", true, bind, failsWith("Address already in use")},
		// Exit code 7: curl could not connect.
		{"host loopback past the proxy", true, "curl -sS --noproxy '*' " + hostURL, failsWith("Exit code 7")},
		{"host loopback as no_proxy", true, "curl -sS " + hostURL, failsWith("Exit code 7")},
		{"tcp to host loopback", true, "exec 3<>/dev/tcp/" + strings.ReplaceAll(ln.Addr().String(), ":", "/") + " && echo connected", failsWith("Connection refused")},
		{"only loopback", true, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '", outputs("lo\n")},

		{"no network: no variables", false, "env | grep -i -e proxy -e _ca -e cert -e cainfo; true", outputs("")},
		{"no network: no egress dir", false, "ls -A /run/corral", outputs("executor\n")},
		{"no network: nothing on the proxy port", false, "exec 3<>/dev/tcp/127.0.0.1/3128 && echo connected", fails("connected")},
		{"no network: the port is free", false, bind, outputs("bound\n")},
		{"no network: curl", false, "curl -sS -x " + egressapi.ProxyURL + " http://example.test/x", fails("hello")},
	}
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		tests = slices.DeleteFunc(tests, func(tc struct {
			name    string
			network bool
			command string
			check   func(t *testing.T, res Result)
		}) bool {
			return strings.Contains(tc.command, "python3")
		})
	}
	t.Run("calls", func(t *testing.T) {
		for _, tc := range tests {
			session := uuid.New()
			if !tc.network {
				e.offline(session)
			}
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				tc.check(t, bash(t, d, session, tc.command))
			})
		}
	})

	if reqs := e.served(); len(reqs) != 1 || reqs[0] != "example.test http://example.test/x" {
		t.Errorf("the egress served %q, want the one request to example.test", reqs)
	}
	conn, err := acceptWithin(ln, 100*time.Millisecond)
	if err == nil {
		conn.Close()
		t.Error("the host's listener accepted a connection")
	}
}

// acceptWithin accepts a connection on ln if one comes within d.
func acceptWithin(ln net.Listener, d time.Duration) (net.Conn, error) {
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(d))
	return ln.Accept()
}

// What a call sent out lands in its result, with a note on what was
// refused; the egress is opened once per sandbox started, with the
// session's identity, and drained after every Bash call, not after a
// file tool's.
func TestEgressSummary(t *testing.T) {
	t.Parallel()
	e := newTestEgress(t)
	d, _ := newEgressDriver(t, e, Config{})
	session, offline := uuid.New(), e.offline(uuid.New())

	res := bash(t, d, session, "curl -sS http://example.test/a; curl -sS -o /dev/null -w '%{http_code}\\n' http://refused.test/secret")
	want := "hello via egress\n403\n[egress] requests refused:\n- GET http://refused.test/secret: refused by rule no-refused: refused.test is not allowed"
	if res.IsError || res.Output != want {
		t.Errorf("output = %q, want %q", res.Output, want)
	}
	if s := res.Egress; s == nil || len(s.Requests) != 1 || s.Requests[0].Host != "example.test" || len(s.Refused) != 1 || s.Refused[0].Host != "refused.test" {
		t.Errorf("Egress = %+v, want the request to example.test and the refusal of refused.test", s)
	}
	res = bash(t, d, session, "true")
	if res.Egress != nil || res.Output != "" {
		t.Errorf("a call that sent nothing = %+v, want no summary and no note", res)
	}
	run(t, d, session, &tool.ReadArgs{FilePath: "/workspace/none"})
	bash(t, d, offline, "true")

	opened, drained, _ := e.calls()
	if want := []egressapi.Identity{who(tenant, session), who(tenant, offline)}; !slices.EqualFunc(opened, want, egressapi.Identity.Equal) {
		t.Errorf("opened for %+v, want %+v", opened, want)
	}
	if got, want := sessionsOf(drained), []uuid.UUID{session, session}; !slices.Equal(got, want) {
		t.Errorf("drained for %v, want %v (each Bash call of the session with network)", got, want)
	}
}

// An egress service that cannot be opened fails the call before anything
// runs; one that cannot be drained costs the call its summary alone.
func TestEgressFailures(t *testing.T) {
	t.Parallel()
	e := newTestEgress(t)
	d, logs := newEgressDriver(t, e, Config{})
	session := uuid.New()

	e.fail(errEgressDown, nil)
	_, err := d.Run(t.Context(), who(tenant, session), &tool.BashArgs{Command: "touch ran"})
	if !errors.Is(err, ErrNotRun) || !strings.Contains(err.Error(), "egress service down") {
		t.Errorf("Run with the egress down: %v, want an error wrapping ErrNotRun that says why", err)
	}
	if live, _ := d.Live(); live != 0 {
		t.Errorf("%d sandboxes live, want none", live)
	}
	if fileExists(d.Workspace(tenant, session) + "/ran") {
		t.Error("the command ran")
	}

	e.fail(nil, errEgressDown)
	res := bash(t, d, session, "curl -sS http://example.test/x")
	if res.IsError || res.Output != "hello via egress\n" || res.Egress != nil {
		t.Errorf("a call whose summary was lost = %+v, want its output alone", res)
	}
	if !strings.Contains(logs.String(), "drain egress") || !strings.Contains(logs.String(), "egress service down") {
		t.Errorf("the lost summary was not logged:\n%s", logs)
	}
}

// Destroy closes the session's egress, whether or not the session ran
// here since the Driver started; Stop does not.
func TestEgressClosedOnDestroy(t *testing.T) {
	t.Parallel()
	e := newTestEgress(t)
	d, _ := newEgressDriver(t, e, Config{})
	session, unknown := uuid.New(), uuid.New()

	bash(t, d, session, "true")
	dir := e.dir(session)
	d.Stop(tenant, session)
	if _, _, closed := e.calls(); len(closed) != 0 {
		t.Errorf("closed for %+v after Stop, want none", closed)
	}
	bash(t, d, session, "true")
	if err := d.Destroy(t.Context(), tenant, session); err != nil {
		t.Fatal(err)
	}
	if err := d.Destroy(t.Context(), tenant, unknown); err != nil {
		t.Fatal(err)
	}
	_, _, closed := e.calls()
	want := []egressapi.Identity{who(tenant, session), {Tenant: tenant, Session: unknown}}
	if !slices.EqualFunc(closed, want, egressapi.Identity.Equal) {
		t.Errorf("closed for %+v, want %+v", closed, want)
	}
	if fileExists(dir) {
		t.Errorf("the session's egress directory %s is still there", dir)
	}
}

// A sandbox sees its own egress directory and nobody else's.
func TestEgressDirsPrivate(t *testing.T) {
	t.Parallel()
	e := newTestEgress(t)
	d, _ := newEgressDriver(t, e, Config{})
	one, two := uuid.New(), uuid.New()
	bash(t, d, two, "true")
	other := e.dir(two)

	for _, command := range []string{
		"ls -A " + other,
		"ls -A " + e.root,
		"test -S " + other + "/" + egressapi.SocketName,
	} {
		res := bash(t, d, one, command)
		if !res.IsError || strings.Contains(res.Output, egressapi.SocketName) || slices.Contains(strings.Split(res.Output, "\n"), two.String()) {
			t.Errorf("%s = %+v, want a failure that shows nothing of the other session's", command, res)
		}
	}
	if res := bash(t, d, one, "ls -A "+egressapi.SandboxDir); res.Output != "ca.pem\negress.sock\n" {
		t.Errorf("own egress dir = %+v", res)
	}
}

// A session with network never takes a pooled sandbox, which has none,
// and fills no pool; one without may.
func TestNetworkSessionsTakeNoPool(t *testing.T) {
	t.Parallel()
	e := newTestEgress(t)
	d, _ := newEgressDriver(t, e, Config{IdleTimeout: time.Hour, PoolSize: 1})
	bash(t, d, e.offline(uuid.New()), "true")
	natstest.WaitFor(t, 10*time.Second, func() error {
		if n := d.Pooled(); n != 1 {
			return fmt.Errorf("%d pooled, want 1", n)
		}
		return nil
	})
	if res := bash(t, d, uuid.New(), "curl -sS http://example.test/x"); res.Output != "hello via egress\n" {
		t.Errorf("a session with network = %+v, want it reached the egress", res)
	}
	if n := d.Pooled(); n != 1 {
		t.Errorf("%d pooled after a session with network started, want the one still there", n)
	}
}
