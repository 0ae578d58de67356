package sandboxmanager

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"

	"corral.dev/pkg/egressapi"
	"corral.dev/pkg/event"
	"corral.dev/pkg/natstest"
	"corral.dev/schemas"
)

// fakeEgress serves the node's egress control socket, control, in a
// directory of its own, root, that the sandbox user reaches, until the
// test ends. The proxy stand-ins its answers start go in servers, closed
// at the end.
type fakeEgress struct {
	control string
	root    string

	mu      sync.Mutex
	servers []*http.Server
}

// start serves the control socket, answering each request with answer,
// which may start goroutines wg counts.
func (f *fakeEgress) start(t *testing.T, answer func(egressapi.Request, *sync.WaitGroup) egressapi.Reply) {
	t.Helper()
	// The sandbox user reaches it: under /tmp, not the test's directory.
	root, err := os.MkdirTemp("", "egress-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	f.control, f.root = filepath.Join(root, "control.sock"), root
	ln, err := net.Listen("unix", f.control)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		f.mu.Lock()
		for _, s := range f.servers {
			s.Close()
		}
		f.mu.Unlock()
		wg.Wait()
		os.RemoveAll(root)
	})
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			var req egressapi.Request
			line, err := bufio.NewReader(conn).ReadBytes('\n')
			if err == nil {
				err = json.Unmarshal(line, &req)
			}
			if err == nil {
				b, _ := json.Marshal(answer(req, &wg))
				conn.Write(append(b, '\n'))
			}
			conn.Close()
		}
	})
}

// egressNode stands in for the node's egress service on its control
// socket: it refuses the first open, then gives every session network
// through a directory whose socket is served by a proxy stand-in that
// answers "hello via egress" to any request but those to refused.test.
type egressNode struct {
	fakeEgress
	opens   int
	summary egressapi.Summary
	// opened are the identities opened, in order.
	opened []egressapi.Identity
}

func newEgressNode(t *testing.T) *egressNode {
	t.Helper()
	n := &egressNode{}
	n.start(t, n.answer)
	return n
}

// answer answers one control request.
func (n *egressNode) answer(req egressapi.Request, wg *sync.WaitGroup) egressapi.Reply {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch req.Op {
	case egressapi.OpOpen:
		n.opened = append(n.opened, req.Identity)
		if n.opens++; n.opens == 1 {
			return egressapi.Reply{Error: "policy not loaded yet"}
		}
		dir := filepath.Join(n.root, req.Identity.Session.String())
		if _, err := os.Stat(dir); err == nil {
			return egressapi.Reply{Network: true, Dir: dir}
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			return egressapi.Reply{Error: err.Error()}
		}
		socket := filepath.Join(dir, egressapi.SocketName)
		ln, err := net.Listen("unix", socket)
		if err != nil {
			return egressapi.Reply{Error: err.Error()}
		}
		os.Chmod(socket, 0o666)
		srv := &http.Server{Handler: http.HandlerFunc(n.proxy)}
		n.servers = append(n.servers, srv)
		wg.Go(func() { srv.Serve(ln) })
		return egressapi.Reply{Network: true, Dir: dir}
	case egressapi.OpDrain:
		sum := n.summary
		n.summary = egressapi.Summary{}
		return egressapi.Reply{Summary: &sum}
	}
	return egressapi.Reply{}
}

func (n *egressNode) proxy(w http.ResponseWriter, r *http.Request) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if r.URL.Hostname() == "refused.test" {
		n.summary.Refused = append(n.summary.Refused, egressapi.Refusal{Scheme: "http", Host: "refused.test", Port: 80, Reason: "not allowed", Count: 1})
		http.Error(w, "refused", http.StatusForbidden)
		return
	}
	n.summary.Requests = append(n.summary.Requests, egressapi.Traffic{Scheme: "http", Host: r.URL.Hostname(), Port: 80, Method: r.Method,
		Status: http.StatusOK, Count: 1, Paths: []string{r.URL.Path}, Rule: "tests"})
	io.WriteString(w, "hello via egress\n")
}

// A Bash call of a session the egress service gives network reaches it,
// and its result records what went out, with the note on what was
// refused; a call the service could not be opened for runs on its next
// delivery, not reported as interrupted.
func TestCallThroughEgress(t *testing.T) {
	_, _, js := natstest.Run(t)
	n := newEgressNode(t)
	startNode(t, js, map[string]string{"CORRAL_EGRESS_SOCKET": n.control})
	session, call := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	dispatch(t, js, session, call, "Bash", `{"command":"curl -sS http://example.test/x; curl -sS -o /dev/null http://refused.test/"}`, call.String())

	r := resultsOf(t, js, session, 1)[0]
	want := "hello via egress\n[egress] requests refused:\n- refused.test: not allowed"
	if r.IsError || r.Output != want {
		t.Errorf("result = %+v, want output %q", r, want)
	}
	if sum := r.Egress; sum == nil || len(sum.Requests) != 1 || sum.Requests[0].Host != "example.test" || len(sum.Refused) != 1 {
		t.Errorf("egress = %+v, want the request to example.test and the refusal", sum)
	}
	assertValid(t, &r)
}

// assertValid checks that a result validates against its schema.
func assertValid(t *testing.T, r *event.ToolCompleted) {
	t.Helper()
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := schemas.Validate(event.TypeToolCompleted, data); err != nil {
		t.Errorf("the result does not validate: %v\n%s", err, data)
	}
}

// A summary with every field set, as egressapi encodes it, validates as
// a result's egress.
func TestEgressSummaryValidates(t *testing.T) {
	sum := egressapi.Summary{
		Requests: []egressapi.Traffic{{Scheme: "https", Host: "github.com", Port: 443, Method: "GET", Status: 200, Count: 3, Sent: 10, Received: 2000,
			Paths: []string{"/a", "/b"}, Rule: "github"}},
		Refused: []egressapi.Refusal{{Scheme: "https", Host: "example.com", Port: 8443, Method: "POST", Path: "/up", Rule: "hold-posts",
			Reason: "held for a reviewer", Approval: uuid.Must(uuid.NewV7()), Count: 2}},
	}
	b, err := json.Marshal(&sum)
	if err != nil {
		t.Fatal(err)
	}
	code := 0
	r := event.ToolCompleted{Header: event.NewHeader(event.TypeToolCompleted, "acme", uuid.Must(uuid.NewV7())), Call: uuid.Must(uuid.NewV7()),
		Name: "Bash", Output: sum.Note(), ExitCode: &code, Egress: &sum}
	assertValid(t, &r)
	if !strings.Contains(string(b), `"approval"`) {
		t.Errorf("summary %s lacks its approval", b)
	}
}
