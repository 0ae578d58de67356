package sandboxmanager

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/egressapi"
	"corral.dev/pkg/environment"
	"corral.dev/pkg/environmentapi"
	"corral.dev/pkg/event"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/sessionlog"
	"corral.dev/pkg/upstreamtest"
)

// tunnels stands in for the node's egress service: it gives every sandbox
// network through a socket that tunnels CONNECTs to the hosts it knows
// (the stand-in upstreams, by name) and refuses the rest, with a CA bundle
// of the upstreams' CA. It records the identities it opens sandboxes for.
type tunnels struct {
	fakeEgress
	hosts  map[string]string // host -> address
	ca     []byte
	opened []egressapi.Identity
}

func newTunnels(t *testing.T, ca *upstreamtest.CA, ups ...*upstreamtest.Upstream) *tunnels {
	t.Helper()
	n := &tunnels{hosts: map[string]string{}, ca: ca.CertPEM()}
	for _, u := range ups {
		n.hosts[u.Host] = u.Addr
	}
	n.start(t, n.answer)
	return n
}

func (n *tunnels) answer(req egressapi.Request, wg *sync.WaitGroup) egressapi.Reply {
	n.mu.Lock()
	defer n.mu.Unlock()
	if req.Op != egressapi.OpOpen {
		return egressapi.Reply{}
	}
	n.opened = append(n.opened, req.Identity)
	dir := filepath.Join(n.root, req.Identity.Session.String())
	if _, err := os.Stat(dir); err == nil {
		return egressapi.Reply{Network: true, Dir: dir}
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return egressapi.Reply{Error: err.Error()}
	}
	if err := os.WriteFile(filepath.Join(dir, egressapi.CABundleName), n.ca, 0o644); err != nil {
		return egressapi.Reply{Error: err.Error()}
	}
	socket := filepath.Join(dir, egressapi.SocketName)
	ln, err := net.Listen("unix", socket)
	if err != nil {
		return egressapi.Reply{Error: err.Error()}
	}
	os.Chmod(socket, 0o666)
	srv := &http.Server{Handler: http.HandlerFunc(n.tunnel)}
	n.servers = append(n.servers, srv)
	wg.Go(func() { srv.Serve(ln) })
	return egressapi.Reply{Network: true, Dir: dir}
}

// tunnel connects a CONNECT to a known host's address.
func (n *tunnels) tunnel(w http.ResponseWriter, r *http.Request) {
	addr, ok := n.hosts[r.URL.Hostname()]
	if r.Method != http.MethodConnect || !ok {
		http.Error(w, "refused", http.StatusForbidden)
		return
	}
	up, err := net.Dial("tcp", addr)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer up.Close()
	conn, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n")
	done := make(chan struct{})
	go func() {
		io.Copy(up, rw)
		up.(*net.TCPConn).CloseWrite()
		close(done)
	}()
	io.Copy(conn, up)
	<-done
}

// setups returns the identities of the setups' sandboxes opened so far.
func (n *tunnels) setups() []egressapi.Identity {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []egressapi.Identity
	for _, id := range n.opened {
		if id.Phase == egressapi.PhaseSetup {
			out = append(out, id)
		}
	}
	return out
}

func (n *tunnels) openedFor(session uuid.UUID) []egressapi.Identity {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []egressapi.Identity
	for _, id := range n.opened {
		if id.Session == session {
			out = append(out, id)
		}
	}
	return out
}

// putEnvironment keeps spec as tenant's environment in the bucket, as the
// API does, and returns its version.
func putEnvironment(t *testing.T, js jetstream.JetStream, tenant string, spec environment.Spec) string {
	t.Helper()
	if err := spec.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	kv, err := js.KeyValue(ctx, bus.BucketEnvironments)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(environmentapi.Entry{Spec: spec, Version: spec.Version(), UpdatedAt: time.Now()})
	if _, err := kv.Put(ctx, environmentapi.Key(tenant, spec.Name), data); err != nil {
		t.Fatal(err)
	}
	return spec.Version()
}

// An environment's setup installs a package from PyPI through egress
// once; the layer is then the node's at the cost of a stat, and a session
// of the environment imports the package from a read-only /opt/env. A
// changed definition builds anew; a failing setup says why; another node
// restores the layer from the store without running the setup.
func TestEnvironmentBuildsOnceAndIsReused(t *testing.T) {
	ctx := t.Context()
	_, _, js := natstest.Run(t)
	ca := upstreamtest.NewCA(t)
	pypi := upstreamtest.PyPI(t, ca, "pypi.org", upstreamtest.Package{Name: "corral-hello", Version: "1.0.0", Content: "GREETING = 'hi from pypi'\n"})
	egress := newTunnels(t, ca, pypi)
	env := map[string]string{"CORRAL_EGRESS_SOCKET": egress.control}
	svc, _ := startNode(t, js, env)

	spec := environment.Spec{Name: "py", Egress: environment.Egress{Presets: []string{"pypi"}},
		Packages: environment.Packages{Pip: []string{"corral-hello==1.0.0"}},
		Setup:    "python3 -c 'import corral_hello' && echo built > /opt/env/marker"}
	v1 := putEnvironment(t, js, "acme", spec)
	session := uuid.Must(uuid.NewV7())
	id := egressapi.Identity{Tenant: "acme", User: "ada", Session: session}

	// Built once, by two calls at once; the second waits for the first.
	type ensured struct {
		layer string
		ms    int64
		err   error
	}
	results := make(chan ensured, 2)
	for range 2 {
		go func() {
			layer, ms, err := svc.ensureEnvironment(ctx, "acme", "py", v1, id)
			results <- ensured{layer, ms, err}
		}()
	}
	var layer string
	var builtMS int64
	for range 2 {
		r := <-results
		if r.err != nil {
			t.Fatalf("ensure: %v", r.err)
		}
		layer, builtMS = r.layer, max(builtMS, r.ms)
	}
	if want := filepath.Join(svc.cfg.DataDir, "environments", "acme", v1); layer != want {
		t.Errorf("layer %s, want %s", layer, want)
	}
	if builtMS <= 0 {
		t.Errorf("setup took %d ms by its count: want it counted", builtMS)
	}
	setups := egress.setups()
	if len(setups) != 1 {
		t.Fatalf("%d setups ran, want 1: %+v", len(setups), setups)
	}
	if s := setups[0]; s.Tenant != "acme" || s.User != "" || s.Environment != "py" || s.EnvironmentVersion != v1 || s.Session == session {
		t.Errorf("the setup spoke for %+v: want the tenant, no user, the environment's version and a build of its own", s)
	}
	for _, f := range []string{"python/corral_hello.py", "marker"} {
		if _, err := os.Stat(filepath.Join(layer, f)); err != nil {
			t.Errorf("the layer lacks %s: %v", f, err)
		}
	}
	if got := pypi.Requests(); len(got) < 2 {
		t.Errorf("PyPI saw %q: want the index and the wheel", got)
	}

	// Again: a stat, no setup.
	fastest := time.Hour
	for range 20 {
		start := time.Now()
		again, ms, err := svc.ensureEnvironment(ctx, "acme", "py", v1, id)
		fastest = min(fastest, time.Since(start))
		if err != nil || again != layer || ms != 0 {
			t.Fatalf("ensure again = %s, %d, %v; want the layer, no setup", again, ms, err)
		}
	}
	if fastest > time.Millisecond {
		t.Errorf("ensuring a layer the node has took %s at best, want well under 1ms", fastest)
	}
	if n := len(egress.setups()); n != 1 {
		t.Errorf("%d setups after ensuring again, want 1", n)
	}
	kv, err := js.KeyValue(ctx, bus.BucketEnvironments)
	if err != nil {
		t.Fatal(err)
	}
	if name, v, built, err := environmentapi.Resolve(ctx, kv, "acme", "py"); err != nil || name != "py" || v != v1 || !built {
		t.Errorf("Resolve after the build = %s, %.8s, %v, %v; want it built", name, v, built, err)
	}

	// A session of the environment imports the package from /opt/env,
	// which it cannot write; its egress identity names the environment.
	record(t, js, sessionlog.Harness, &event.SessionRequested{Header: event.NewHeader(event.TypeSessionRequested, "acme", session), Request: uuid.Must(uuid.NewV7()),
		User: "ada", Model: "openai:gpt-test", Prompt: "hi", Environment: "py", EnvironmentVersion: v1})
	dispatch(t, js, session, uuid.Must(uuid.NewV7()), "Bash", `{"command":"python3 -c 'import corral_hello; print(corral_hello.GREETING)'; cat /opt/env/marker; touch /opt/env/x 2>&1; echo \"PATH=$PATH\""}`, "use")
	r := resultsOf(t, js, session, 1)[0]
	for _, want := range []string{"hi from pypi", "built", "Read-only file system", "PATH=/opt/env/bin:"} {
		if !strings.Contains(r.Output, want) {
			t.Errorf("the session's call:\n%s\nwant it to hold %q", r.Output, want)
		}
	}
	if ids := egress.openedFor(session); len(ids) == 0 || ids[0].Environment != "py" || ids[0].EnvironmentVersion != v1 || ids[0].Phase != "" {
		t.Errorf("egress opened the session's sandbox as %+v; want its environment", ids)
	}
	// A session without an environment has no /opt/env.
	plain := uuid.Must(uuid.NewV7())
	dispatch(t, js, plain, uuid.Must(uuid.NewV7()), "Bash", `{"command":"ls /opt/env 2>&1; echo \"PATH=$PATH\""}`, "plain")
	if r := resultsOf(t, js, plain, 1)[0]; !strings.Contains(r.Output, "No such file") || strings.Contains(r.Output, "/opt/env/bin") {
		t.Errorf("a session without an environment:\n%s", r.Output)
	}

	// A changed definition is another version, built anew.
	spec.Setup += " && echo two >> /opt/env/marker"
	v2 := putEnvironment(t, js, "acme", spec)
	if v2 == v1 {
		t.Fatal("a changed setup kept its version")
	}
	layer2, ms, err := svc.ensureEnvironment(ctx, "acme", "py", v2, id)
	if err != nil || ms <= 0 || layer2 == layer {
		t.Fatalf("ensure the new version = %s, %d, %v; want a new build", layer2, ms, err)
	}
	if n := len(egress.setups()); n != 2 {
		t.Errorf("%d setups after a change, want 2", n)
	}
	// The old version is still there for the sessions that use it.
	if _, _, err := svc.ensureEnvironment(ctx, "acme", "py", v1, id); err != nil {
		t.Errorf("ensure the old version: %v", err)
	}

	// A failing setup fails the session that needed it, saying why.
	failing := environment.Spec{Name: "broken", Setup: "echo fetching the tools\necho the mirror is down >&2\nexit 7"}
	v3 := putEnvironment(t, js, "acme", failing)
	_, _, err = svc.ensureEnvironment(ctx, "acme", "broken", v3, id)
	if !isPrepareError(err) || !strings.Contains(err.Error(), `the setup of environment "broken" failed (exit code 7)`) || !strings.Contains(err.Error(), "the mirror is down") {
		t.Errorf("a failing setup: %v; want the session's error with the exit code and the output's end", err)
	}
	if _, err := os.Stat(filepath.Join(svc.cfg.DataDir, "environments", "acme", v3)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed setup left a layer: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(svc.cfg.DataDir, "environments", "acme", ".*")); len(left) != 0 {
		t.Errorf("a failed setup left %v", left)
	}
	// A version the environment never had is the session's error too.
	if _, _, err := svc.ensureEnvironment(ctx, "acme", "py", strings.Repeat("0", 64), id); !isPrepareError(err) || !strings.Contains(err.Error(), "no version 000000000000") {
		t.Errorf("an unknown version: %v", err)
	}

	// Another node (another data directory, the same store) restores the
	// layer without a setup.
	before := len(egress.setups())
	other := newNode(t, js, env)
	t.Cleanup(other.driver.Close)
	restored, ms, err := other.ensureEnvironment(ctx, "acme", "py", v1, id)
	if err != nil || ms != 0 || !strings.HasPrefix(restored, other.cfg.DataDir) {
		t.Fatalf("ensure on another node = %s, %d, %v; want the layer restored", restored, ms, err)
	}
	if n := len(egress.setups()); n != before {
		t.Errorf("%d setups after another node ensured the layer, want still %d", n, before)
	}
	for _, f := range []string{"python/corral_hello.py", "marker"} {
		want, _ := os.ReadFile(filepath.Join(layer, f))
		got, err := os.ReadFile(filepath.Join(restored, f))
		if err != nil || string(got) != string(want) {
			t.Errorf("the restored layer's %s: %q, %v; want %q", f, got, err, want)
		}
	}
}

// environmentAsk sends req to op of the environment API on subject, and
// decodes the reply; it returns the error code and description the API
// answered with instead, if any.
func environmentAsk(t *testing.T, nc *nats.Conn, subject string, req environmentapi.Request) (environmentapi.Reply, string) {
	t.Helper()
	data, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	msg := natstest.Request(t, nc, subject, data)
	if code := msg.Header.Get("Nats-Service-Error-Code"); code != "" {
		return environmentapi.Reply{}, code + " " + msg.Header.Get("Nats-Service-Error")
	}
	var reply environmentapi.Reply
	if err := json.Unmarshal(msg.Data, &reply); err != nil {
		t.Fatal(err)
	}
	return reply, ""
}

// The environment API puts (creating, changing or leaving as it is),
// shows, lists, makes the default and removes a tenant's environments;
// it changes them only on the tenant's own subject, and refuses what is
// invalid.
func TestEnvironmentAPI(t *testing.T) {
	_, nc, js := natstest.Run(t)
	svc := newNode(t, js, nil)
	svc.cfg.Clients = "" // no accounts on this server
	natstest.Serve(t, svc.Run)
	write := func(op string) string { return environmentapi.TenantSubject("acme", op) }
	read := func(op string) string { return environmentapi.Subject("acme", "ada", op) }
	py := environment.Spec{Name: "py", Egress: environment.Egress{Presets: []string{"pypi"}}, Packages: environment.Packages{Pip: []string{"requests==2.32.0"}}}

	if _, e := environmentAsk(t, nc, read(environmentapi.OpPut), environmentapi.Request{Spec: &py}); !strings.HasPrefix(e, "403 changing an environment takes a reviewer's or an operator's credential") {
		t.Errorf("put on a user's subject: %q", e)
	}
	r, e := environmentAsk(t, nc, write(environmentapi.OpPut), environmentapi.Request{Spec: &py, Default: true})
	if e != "" || r.Outcome != environmentapi.Created || r.Environment.Version != py.Version() || !r.Environment.Default || r.Default != "py" {
		t.Fatalf("create: %+v %s", r, e)
	}
	if r, e := environmentAsk(t, nc, write(environmentapi.OpPut), environmentapi.Request{Spec: &py}); e != "" || r.Outcome != environmentapi.Unchanged {
		t.Errorf("put again: %+v %s; want unchanged", r, e)
	}
	py.Description = "for the data team"
	if r, e := environmentAsk(t, nc, write(environmentapi.OpPut), environmentapi.Request{Spec: &py}); e != "" || r.Outcome != environmentapi.Changed || r.Environment.Version != py.Version() {
		t.Errorf("put a new description: %+v %s; want changed, the same version", r, e)
	}
	node := environment.Spec{Name: "node", Packages: environment.Packages{NPM: []string{"left-pad@1.3.0"}}}
	if _, e := environmentAsk(t, nc, write(environmentapi.OpPut), environmentapi.Request{Spec: &node}); e != "" {
		t.Fatal(e)
	}
	for _, tc := range []struct {
		name string
		req  environmentapi.Request
		want string
	}{
		{"no definition", environmentapi.Request{Name: "x"}, "400 put needs a definition"},
		{"apt", environmentapi.Request{Spec: &environment.Spec{Name: "x", Packages: environment.Packages{Apt: []string{"curl"}}}}, "400 invalid environment \"x\": packages.apt: refused"},
		{"bad name", environmentapi.Request{Spec: &environment.Spec{Name: "../x"}}, `400 invalid environment "../x": name`},
	} {
		if _, e := environmentAsk(t, nc, write(environmentapi.OpPut), tc.req); !strings.HasPrefix(e, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, e, tc.want)
		}
	}
	// Unknown fields are refused, not dropped.
	msg := natstest.Request(t, nc, write(environmentapi.OpPut), []byte(`{"spec":{"name":"x","image":"ubuntu"}}`))
	if got := msg.Header.Get("Nats-Service-Error"); !strings.Contains(got, `unknown field "image"`) {
		t.Errorf("a definition with an unknown field: %q", got)
	}

	ls, e := environmentAsk(t, nc, read(environmentapi.OpList), environmentapi.Request{})
	if e != "" || len(ls.Environments) != 2 || ls.Environments[0].Spec.Name != "node" || ls.Environments[1].Spec.Name != "py" || !ls.Environments[1].Default || ls.Default != "py" {
		t.Errorf("ls: %+v %s", ls, e)
	}
	if r, e := environmentAsk(t, nc, read(environmentapi.OpShow), environmentapi.Request{Name: "py"}); e != "" || r.Environment.Spec.Description != "for the data team" || !r.Environment.Default {
		t.Errorf("show: %+v %s", r, e)
	}
	if _, e := environmentAsk(t, nc, read(environmentapi.OpShow), environmentapi.Request{Name: "rust"}); !strings.HasPrefix(e, `404 no such environment "rust" in tenant acme`) {
		t.Errorf("show an unknown one: %q", e)
	}
	if _, e := environmentAsk(t, nc, environmentapi.Subject("initech", "ivan", environmentapi.OpShow), environmentapi.Request{Name: "py"}); !strings.HasPrefix(e, "404") {
		t.Errorf("another tenant's: %q", e)
	}
	if r, e := environmentAsk(t, nc, write(environmentapi.OpDefault), environmentapi.Request{Name: "node"}); e != "" || r.Default != "node" {
		t.Errorf("default node: %+v %s", r, e)
	}
	if _, e := environmentAsk(t, nc, write(environmentapi.OpDefault), environmentapi.Request{Name: "rust"}); !strings.HasPrefix(e, "404") {
		t.Errorf("default an unknown one: %q", e)
	}
	if r, e := environmentAsk(t, nc, write(environmentapi.OpRemove), environmentapi.Request{Name: "node"}); e != "" || r.Default != "" {
		t.Errorf("rm the default: %+v %s; want no default left", r, e)
	}
	if _, e := environmentAsk(t, nc, write(environmentapi.OpRemove), environmentapi.Request{Name: "node"}); !strings.HasPrefix(e, "404") {
		t.Errorf("rm twice: %q", e)
	}
	kv, _ := js.KeyValue(t.Context(), bus.BucketEnvironments)
	if name, _, _, err := environmentapi.Resolve(t.Context(), kv, "acme", ""); err != nil || name != "" {
		t.Errorf("Resolve the default after its removal = %q, %v; want none", name, err)
	}
}
