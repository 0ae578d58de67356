package egress

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/egressapi"
	"corral.dev/pkg/environment"
	"corral.dev/pkg/environmentapi"
	"corral.dev/pkg/upstreamtest"
)

// putEnvironment keeps spec as tenant's environment, and returns the
// identity of a session of it.
func (f *fixture) putEnvironment(tenant string, spec environment.Spec) egressapi.Identity {
	f.t.Helper()
	ctx := context.Background()
	kv, err := f.js.KeyValue(ctx, bus.BucketEnvironments)
	if err != nil {
		f.t.Fatal(err)
	}
	data, _ := json.Marshal(environmentapi.Entry{Spec: spec, Version: spec.Version(), UpdatedAt: time.Now()})
	if _, err := kv.Put(ctx, environmentapi.Key(tenant, spec.Name), data); err != nil {
		f.t.Fatal(err)
	}
	return egressapi.Identity{Tenant: tenant, User: "ada", Session: uuid.Must(uuid.NewV7()), Environment: spec.Name, EnvironmentVersion: spec.Version()}
}

// try sends a request through c and returns its status, and its body or
// the error that stood for it (a refused CONNECT fails the request).
func try(c *http.Client, method, url string) (int, string, http.Header) {
	req, _ := http.NewRequest(method, url, strings.NewReader("body"))
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error(), nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// A session's environment lets its sandbox reach its hosts where no rule
// of the policy decides: a tenant with no rule at all gets network for
// them, and nothing else; the policy's own denials and holds still win;
// a version the environment does not have allows nothing; what was
// allowed is allowed again by a restarted service; a setup never waits
// for a reviewer.
func TestEnvironmentAllowsItsHosts(t *testing.T) {
	f := newFixture(t)
	pkgs := upstreamtest.Start(t, f.ca, "pkgs.example.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "package %s", r.URL.Path)
	}))
	f.stop()
	f.cfg.Resolve["pkgs.example.test"] = pkgs.Addr
	f.start()
	ctx := context.Background()
	spec := environment.Spec{Name: "tools", Egress: environment.Egress{Presets: []string{"npm"}, Hosts: []string{"pkgs.example.test", "*.example.org"}}}
	// Umbrella has no egress rule at all: without an environment, no
	// network.
	if r, err := f.control().Open(ctx, identity("umbrella", "ada")); err != nil || r.Network {
		t.Fatalf("open without an environment = %+v, %v; want no network", r, err)
	}
	id := f.putEnvironment("umbrella", spec)
	r, err := f.control().Open(ctx, id)
	if err != nil || !r.Network {
		t.Fatalf("open with an environment = %+v, %v; want network", r, err)
	}
	idDir := r.Dir
	c := f.client(r.Dir)
	if code, body, _ := try(c, "GET", "https://pkgs.example.test/left-pad"); code != 200 || body != "package /left-pad" {
		t.Errorf("the environment's host: %d %q", code, body)
	}
	if code, body, _ := try(c, "GET", "https://files.example.test/f"); code == 200 {
		t.Errorf("a host the environment does not name: %d %q", code, body)
	}
	sum, err := f.control().Drain(ctx, id)
	if err != nil || sum == nil || len(sum.Requests) != 1 || sum.Requests[0].Rule != "environment:tools" || len(sum.Refused) != 1 {
		t.Errorf("summary %+v, %v; want the request allowed by environment:tools and one refused", sum, err)
	}

	// Another version of the definition than the bucket has allows
	// nothing: the session's own version is what it may reach.
	stale := id
	stale.Session, stale.EnvironmentVersion = uuid.Must(uuid.NewV7()), strings.Repeat("0", 64)
	if r, err := f.control().Open(ctx, stale); err != nil || r.Network {
		t.Errorf("open with a version the environment does not have = %+v, %v; want no network", r, err)
	}

	// The policy's rules still decide what they hold for: initech's
	// deny everything, acme's hold uploads for a reviewer.
	denied := f.putEnvironment("initech", spec)
	r, err = f.control().Open(ctx, denied)
	if err != nil || !r.Network {
		t.Fatalf("open for initech's environment = %+v, %v", r, err)
	}
	if code, body, _ := try(f.client(r.Dir), "GET", "https://pkgs.example.test/x"); code == 200 || !strings.Contains(body, "Forbidden") {
		t.Errorf("initech's rule denies everything, its environment notwithstanding: %d %q", code, body)
	}
	held := f.putEnvironment("acme", environment.Spec{Name: "api", Egress: environment.Egress{Hosts: []string{"api.example.test", "pkgs.example.test"}}})
	r, err = f.control().Open(ctx, held)
	if err != nil {
		t.Fatal(err)
	}
	if code, _, hdr := try(f.client(r.Dir), "POST", "https://api.example.test/upload"); code != 403 || hdr.Get("X-Corral-Egress-Approval") == "" {
		t.Errorf("an upload acme's policy holds: %d, approval %q; want held", code, hdr.Get("X-Corral-Egress-Approval"))
	}

	// A setup is judged as its sessions are, but what would wait for a
	// reviewer is refused.
	setup := held
	setup.Session, setup.User, setup.Phase = uuid.Must(uuid.NewV7()), "", egressapi.PhaseSetup
	r, err = f.control().Open(ctx, setup)
	if err != nil || !r.Network {
		t.Fatalf("open a setup = %+v, %v", r, err)
	}
	sc := f.client(r.Dir)
	if code, body, hdr := try(sc, "POST", "https://api.example.test/upload"); code != 403 || hdr.Get("X-Corral-Egress-Approval") != "" || !strings.Contains(body, "cannot wait for a reviewer") {
		t.Errorf("a setup's upload: %d %q, approval %q; want refused outright", code, body, hdr.Get("X-Corral-Egress-Approval"))
	}
	if code, _, _ := try(sc, "GET", "https://pkgs.example.test/y"); code != 200 {
		t.Errorf("a setup's fetch from its environment's host: %d", code)
	}

	// A restarted service allows the open sandboxes what it did, before
	// anyone opens them again.
	f.stop()
	f.start()
	if code, body, _ := try(f.client(idDir), "GET", "https://pkgs.example.test/again"); code != 200 {
		t.Errorf("after a restart: %d %q", code, body)
	}
}
