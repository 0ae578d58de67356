package gateway

import (
	"bufio"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/logtest"
	"corral.dev/services/gateway/internal/wire"
)

// countingProxy forwards TCP connections to addr, and counts them.
func countingProxy(t *testing.T, addr string) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var n atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			s, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			go func() { _, _ = io.Copy(s, c); s.Close() }()
			go func() { _, _ = io.Copy(c, s); c.Close() }()
		}
	}()
	return ln.Addr().String(), &n
}

// TestRefusedKeysCostNoSignIn checks that a key the server refused is
// refused again for a while without another sign-in, and that an address
// whose keys keep being refused may try no more for a while, while
// others may.
func TestRefusedKeysCostNoSignIn(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	conf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(conf, []byte(`authorization { users: [{user: "c-0123456789abcdef0123456789abcdef", password: "right"}] }`), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := bus.StartServer(bus.ServerConfig{Host: "127.0.0.1", Port: -1, StoreDir: dir, ConfigFile: conf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	proxy, signIns := countingProxy(t, srv.Addr().String())
	cs := newClients("nats://"+proxy, nil, slog.New(slog.DiscardHandler), time.Minute, 100)
	key := func(i int) string { return fmt.Sprintf("c-%032x:wrong", i) }
	try := func(k, addr string, want error, wantSignIns int64) {
		t.Helper()
		_, _, err := cs.acquire(context.Background(), k, addr)
		if !errors.Is(err, want) {
			t.Fatalf("%s from %s: %v, want %v", k, addr, err, want)
		}
		if n := signIns.Load(); n != wantSignIns {
			t.Fatalf("%s from %s: %d sign-ins so far, want %d", k, addr, n, wantSignIns)
		}
	}
	try(key(0), "192.0.2.1", errKeyRefused, 1)
	try(key(0), "192.0.2.1", errKeyRefused, 1)
	try(key(0), "192.0.2.2", errKeyRefused, 1)
	for i := 1; i < failBurst; i++ {
		try(key(i), "192.0.2.1", errKeyRefused, int64(1+i))
	}
	try(key(failBurst), "192.0.2.1", errSignInRate, failBurst)
	try(key(failBurst), "192.0.2.2", errKeyRefused, failBurst+1)

	// Over HTTP, the API's shapes: 401, then 429.
	s := &Service{log: slog.New(slog.DiscardHandler), clients: cs}
	for _, tc := range []struct {
		key    string
		status int
		typ    string
	}{{key(0), http.StatusUnauthorized, wire.Authentication}, {key(failBurst + 1), http.StatusTooManyRequests, wire.RateLimit}} {
		req := httptest.NewRequest(http.MethodGet, "/v1/sessions", nil)
		req.RemoteAddr = "192.0.2.1:5555"
		req.Header.Set("x-api-key", tc.key)
		rec := httptest.NewRecorder()
		s.routes().ServeHTTP(rec, req)
		var body wire.ErrorBody
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != tc.status || body.Error.Type != tc.typ {
			t.Errorf("%s: %d %s, want %d %s", tc.key, rec.Code, rec.Body, tc.status, tc.typ)
		}
	}
	if n := signIns.Load(); n != failBurst+1 {
		t.Errorf("%d sign-ins, want %d", n, failBurst+1)
	}
}

// TestSignInsOfKeysTakenLatelyAreNotHeldBack checks that an address
// waiting for its refused sign-ins holds back no key the server took
// lately: the clients behind one proxy are not locked out by one of them
// guessing keys. A key refused since is held back again.
func TestSignInsOfKeysTakenLatelyAreNotHeldBack(t *testing.T) {
	t.Parallel()
	g := newSignInGate()
	now := time.Now()
	g.now = func() time.Time { return now }
	key := func(s string) [sha256.Size]byte { return sha256.Sum256([]byte(s)) }
	good := key("c-good:secret")
	g.succeeded(good)
	for i := range failBurst {
		g.failed(key(fmt.Sprint("guess", i)), "192.0.2.1")
	}
	if err := g.check(key("c-other:secret"), "192.0.2.1"); !errors.Is(err, errSignInRate) {
		t.Fatalf("a key never taken, from the waiting address: %v, want %v", err, errSignInRate)
	}
	if err := g.check(good, "192.0.2.1"); err != nil {
		t.Fatalf("a key taken lately, from the waiting address: %v, want it tried", err)
	}
	g.failed(good, "192.0.2.3") // revoked since
	now = now.Add(refusalTTL)
	for i := range failBurst {
		g.failed(key(fmt.Sprint("again", i)), "192.0.2.1")
	}
	if err := g.check(good, "192.0.2.1"); !errors.Is(err, errSignInRate) {
		t.Fatalf("a key refused since it was taken: %v, want %v", err, errSignInRate)
	}
}

// TestInternalErrorsAreNotShown checks that a request that fails inside
// the gateway is answered with the API's error shape and its request ID,
// and nothing of the failure, which is logged under that ID.
func TestInternalErrorsAreNotShown(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	var log logtest.Buffer
	a.s.log = slog.New(slog.NewTextHandler(&log, nil))
	h := a.s.authenticated(func(context.Context, *caller, http.ResponseWriter, *http.Request) error {
		return errors.New("read $JS.API.DIRECT.GET.EVENTS at nats://10.1.2.3:4222: timeout")
	})
	req := httptest.NewRequest(http.MethodGet, "/v1/sessions", nil)
	req.Header.Set("x-api-key", a.key)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var body wire.ErrorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	rid := rec.Header().Get("request-id")
	switch {
	case rec.Code != http.StatusInternalServerError || body.Error.Type != wire.APIError:
		t.Errorf("%d %s, want 500 api_error", rec.Code, rec.Body)
	case strings.Contains(rec.Body.String(), "10.1.2.3") || strings.Contains(rec.Body.String(), "$JS"):
		t.Errorf("the answer tells the failure: %s", rec.Body)
	case rid == "" || body.RequestID != rid || !strings.Contains(body.Error.Message, rid):
		t.Errorf("the answer %s does not name its request ID %q", rec.Body, rid)
	}
	logged := log.String()
	if !strings.Contains(logged, rid) || !strings.Contains(logged, "10.1.2.3") {
		t.Errorf("the failure is not logged under its request ID:\n%s", logged)
	}
}

// TestInterruptCannotBeSuppressed checks that another client cannot keep
// a stop from reaching the harness by sending first a request with the
// message ID the stop would have: the requests' stream drops a message
// whose ID it holds, whoever sent it.
func TestInterruptCannotBeSuppressed(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	ctx := context.Background()
	session := a.startSession(t)
	last, err := lastSeq(ctx, a.js, "acme", session)
	if err != nil {
		t.Fatal(err)
	}
	// Mallory, another user of the tenant, can read the session's log,
	// and publish requests of her own.
	forged := uuid.NewSHA1(controlNamespace, fmt.Appendf(nil, "%s:stopped:%d", bus.SessionKey("acme", session), last))
	stop := event.SessionStopped{Header: event.NewHeader(event.TypeSessionStopped, "acme", session), By: "mallory"}
	if err := bus.Publish(ctx, a.js, bus.RequestSubject("acme", session, "mallory"), forged.String(), &stop); err != nil {
		t.Fatal(err)
	}
	c := a.caller(t)
	if err := a.s.interrupt(ctx, c, &sessionRecord{ID: session, User: "ada"}); err != nil {
		t.Fatal(err)
	}
	st, err := a.js.Stream(ctx, bus.StreamRequests)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(ctx, bus.RequestSubject("acme", session, "ada"))
	if err != nil {
		t.Fatalf("ada's stop is not in the requests' stream: %v", err)
	}
	if !strings.Contains(string(m.Data), event.TypeSessionStopped) {
		t.Errorf("ada's request: %s", m.Data)
	}
}

// caller returns the caller of the API's key, as user ada.
func (a *testAPI) caller(t testing.TB) *caller {
	t.Helper()
	c, release, err := a.s.clients.acquire(context.Background(), a.key, "192.0.2.1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	return &caller{client: c, tenant: "acme", user: "ada"}
}

// TestRecordsAreCappedPerTenant checks that a tenant that keeps as many
// records as it may creates no more, and that another tenant still can.
func TestRecordsAreCappedPerTenant(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	a.s.cfg.MaxRecords = 3
	ctx := context.Background()
	for i := range 3 {
		id := fmt.Sprintf("agent_%d", i)
		if err := writeRecord(ctx, a.js, recordKey("acme", kindAgent, id), agentRecord{ID: id}, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := writeRecord(ctx, a.js, recordKey("acmes", kindAgent, "agent_x"), agentRecord{ID: "agent_x"}, 0); err != nil {
		t.Fatal(err)
	}
	created := 0
	h := a.s.capped(func(context.Context, *caller, http.ResponseWriter, *http.Request) error {
		created++
		return nil
	})
	c := a.caller(t)
	err := h(ctx, c, nil, nil)
	var ae *apiError
	if !errors.As(err, &ae) || ae.status != http.StatusForbidden || !strings.Contains(ae.msg, "CORRAL_GATEWAY_MAX_RECORDS") {
		t.Errorf("a fourth record of acme: %v, want refused", err)
	}
	other := *c
	other.tenant = "initech"
	if err := h(ctx, &other, nil, nil); err != nil || created != 1 {
		t.Errorf("initech's first record: %v (created %d)", err, created)
	}
	other.tenant = "acmes" // a tenant whose name starts as acme's does
	if err := h(ctx, &other, nil, nil); err != nil || created != 2 {
		t.Errorf("acmes's second record: %v (created %d)", err, created)
	}
}

// TestSlowReaderIsLetGo checks that a stream whose reader reads too
// slowly holds up no other stream of the same key, and is not kept for
// good: once it is too far behind the log it ends with an error saying
// which event to go on from, after a gapless run of the session's events.
func TestSlowReaderIsLetGo(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	a.s.cfg.MaxBehind = 50
	session := a.startSession(t)

	// Little held between the stream and its reader: a receive buffer
	// made small before the connection's window is agreed.
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 16<<10) })
		return cmp.Or(err, serr)
	}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(a.s.routes())
	hs.Listener = smallSends{ln}
	hs.Start()
	t.Cleanup(hs.Close)
	conn, err := d.Dial("tcp", strings.TrimPrefix(hs.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /v1/sessions/%s/events/stream HTTP/1.1\r\nHost: gateway\r\nx-api-key: %s\r\n\r\n", session, a.key)
	slow := bufio.NewReader(&throttled{conn})
	for {
		line, err := slow.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line == "\r\n" {
			break // the headers: the stream follows the log
		}
	}
	type result struct {
		ids []string
		end sseEvent
		err error
	}
	slowDone := make(chan result, 1)
	go func() {
		r := newSSEReader(httputil.NewChunkedReader(slow))
		var res result
		for {
			ev, err := r.next()
			if err != nil || ev.name == "error" {
				res.end, res.err = ev, err
				slowDone <- res
				return
			}
			res.ids = append(res.ids, ev.id)
		}
	}()
	fast, stop := a.openStream(t, session, "")
	defer stop()

	// The log grows as fast as the other stream reads it, by far more
	// than the connection's buffers hold.
	const turns, batch = 1500, 50
	text := strings.Repeat("x", 4<<10)
	var ids []string
	for turn := 1; turn <= turns; turn++ {
		a.responded(t, session, turn, fmt.Sprintf("%d %s", turn, text))
		if turn%batch != 0 {
			continue
		}
		for len(ids) < 3*turn {
			ev, err := fast.next()
			if err != nil || ev.name == "error" {
				t.Fatalf("the other stream, after %d events: %v %s", len(ids), err, ev.data)
			}
			ids = append(ids, ev.id)
		}
		select {
		case <-slowDone:
			turn = turns // it ended: enough
		default:
		}
	}

	var res result
	select {
	case res = <-slowDone:
	case <-time.After(30 * time.Second):
		t.Fatal("the slow stream did not end")
	}
	if res.err != nil {
		t.Fatalf("the slow stream, after %d events: %v, want an error event", len(res.ids), res.err)
	}
	got := res.ids
	if len(got) == 0 || len(got) >= len(ids) {
		t.Fatalf("the slow reader got %d events of %d", len(got), len(ids))
	}
	for i := range got {
		if got[i] != ids[i] {
			t.Fatalf("event %d: %s, want %s", i, got[i], ids[i])
		}
	}
	var body wire.ErrorBody
	if err := json.Unmarshal(res.end.data, &body); err != nil {
		t.Fatal(err)
	}
	if body.Error.Type != wire.Overloaded || !strings.Contains(body.Error.Message, "Last-Event-ID: "+got[len(got)-1]) {
		t.Errorf("the end: %s, want it to name the last event sent, %s", res.end.data, got[len(got)-1])
	}
}

// smallSends is a listener whose connections buffer little of what is
// written to them.
type smallSends struct{ net.Listener }

func (l smallSends) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		err = c.(*net.TCPConn).SetWriteBuffer(16 << 10)
	}
	return c, err
}

// throttled reads at most 16 KiB each 10 ms.
type throttled struct{ r io.Reader }

func (t *throttled) Read(p []byte) (int, error) {
	time.Sleep(10 * time.Millisecond)
	return t.r.Read(p[:min(len(p), 16<<10)])
}
