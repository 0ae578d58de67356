package egress

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"corral.dev/services/egress/internal/proxy"
)

// A sandbox that makes many distinct requests hides nothing: past the
// bound, what is left is summed up, and paths are cut short.
func TestAuditSumsUpPastItsBound(t *testing.T) {
	a, err := newAudit(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	id := identity("acme", "ada")
	for i := range maxGroups + 50 {
		a.Record(id, proxy.Entry{Target: proxy.Target{Scheme: "https", Host: fmt.Sprintf("h%d.example.test", i), Port: 443, Method: "GET", Path: "/"}, Status: 403, Refused: true, Reason: "no"})
	}
	for range 3 {
		a.Record(id, proxy.Entry{Target: proxy.Target{Scheme: "https", Host: "pypi.org", Port: 443, Method: "GET", Path: "/" + strings.Repeat("x", 5000)}, Status: 200, Received: 10})
	}
	s := a.drain(id.Tenant, id.Session)
	if n := len(s.Requests) + len(s.Refused); n > maxGroups+2 {
		t.Errorf("%d groups, want at most %d", n, maxGroups+2)
	}
	last := s.Refused[len(s.Refused)-1]
	if last.Host != overflow || last.Count != 50 {
		t.Errorf("the refusals past the bound: %+v, want 50 in one group", last)
	}
	if len(s.Requests) != 1 || s.Requests[0].Host != overflow || s.Requests[0].Count != 3 || s.Requests[0].Received != 30 {
		t.Errorf("the requests past the bound: %+v, want 3 summed up", s.Requests)
	}
	a.Record(id, proxy.Entry{Target: proxy.Target{Scheme: "https", Host: "pypi.org", Port: 443, Method: "GET", Path: "/" + strings.Repeat("x", 5000)}, Status: 200})
	if p := a.drain(id.Tenant, id.Session).Requests[0].Paths[0]; len(p) > maxPath+len("…") {
		t.Errorf("a path of %d bytes was kept", len(p))
	}
}
