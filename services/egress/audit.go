package egress

import (
	"strings"
	"sync"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"corral.dev/pkg/egressapi"
	"corral.dev/services/egress/internal/proxy"
)

// maxGroups bounds the groups a session's summary holds between two
// drains: past it, the requests are summed up in one group, and the
// refusals in another.
const maxGroups = 200

// audit keeps what each sandbox sent since the sandbox-manager last
// drained it (after each call), grouped, and counts every request in the
// metrics. Hosts are never metric labels: the model chooses them.
type audit struct {
	mu       sync.Mutex
	sessions map[sessionKey]*egressapi.Summary

	requests       *prometheus.CounterVec
	sent, received prometheus.Counter
}

type sessionKey struct {
	tenant  string
	session uuid.UUID
}

func newAudit(reg prometheus.Registerer) (*audit, error) {
	bytes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "corral_egress_bytes_total",
		Help: "Bytes of the sandboxes' requests (sent) and their answers (received).",
	}, []string{"direction"})
	a := &audit{
		sessions: make(map[sessionKey]*egressapi.Summary),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "corral_egress_requests_total",
			Help: "Requests from the sandboxes, by decision (allow, deny, approve: held for a reviewer, approved: passed after one) and scheme.",
		}, []string{"decision", "scheme"}),
		sent:     bytes.WithLabelValues("sent"),
		received: bytes.WithLabelValues("received"),
	}
	for _, c := range []prometheus.Collector{a.requests, bytes} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// Record takes one request of a sandbox. See [proxy.Recorder].
func (a *audit) Record(id egressapi.Identity, e proxy.Entry) {
	decision := e.Verdict.Decision
	if e.Approval != uuid.Nil && !e.Refused {
		decision = "approved"
	}
	if decision == "" {
		decision = "deny"
	}
	a.requests.WithLabelValues(decision, e.Scheme).Inc()
	a.sent.Add(float64(e.Sent))
	a.received.Add(float64(e.Received))

	a.mu.Lock()
	defer a.mu.Unlock()
	k := sessionKey{id.Tenant, id.Session}
	s := a.sessions[k]
	if s == nil {
		s = &egressapi.Summary{}
		a.sessions[k] = s
	}
	if e.Refused {
		reason := e.Reason
		if reason == "" {
			reason = e.Verdict.Reason
		}
		for i := range s.Refused {
			r := &s.Refused[i]
			if r.Host == e.Host && r.Port == e.Port && r.Method == e.Method && r.Path == e.Path && r.Rule == e.Verdict.Rule && r.Approval == e.Approval {
				r.Count++
				return
			}
		}
		r := egressapi.Refusal{
			Scheme: e.Scheme, Host: e.Host, Port: e.Port, Method: e.Method, Path: clip(e.Path),
			Rule: e.Verdict.Rule, Reason: reason, Approval: e.Approval, Count: 1,
		}
		if len(s.Refused)+len(s.Requests) >= maxGroups {
			// Past the bound, what is left is summed up in one group, so
			// that many refusals hide no request, nor the other way round.
			r = egressapi.Refusal{Host: overflow, Reason: "more refusals, to other hosts or paths", Count: 1}
			for i := range s.Refused {
				if s.Refused[i].Host == overflow {
					s.Refused[i].Count++
					return
				}
			}
		}
		s.Refused = append(s.Refused, r)
		return
	}
	for i := range s.Requests {
		t := &s.Requests[i]
		if t.Scheme == e.Scheme && t.Host == e.Host && t.Port == e.Port && t.Method == e.Method && t.Status == e.Status {
			t.Count++
			t.Sent += e.Sent
			t.Received += e.Received
			addPath(t, e.Path)
			return
		}
	}
	t := egressapi.Traffic{
		Scheme: e.Scheme, Host: e.Host, Port: e.Port, Method: e.Method, Status: e.Status,
		Count: 1, Sent: e.Sent, Received: e.Received, Rule: e.Verdict.Rule,
	}
	addPath(&t, e.Path)
	if len(s.Refused)+len(s.Requests) >= maxGroups {
		for i := range s.Requests {
			if o := &s.Requests[i]; o.Host == overflow {
				o.Count++
				o.Sent += e.Sent
				o.Received += e.Received
				return
			}
		}
		t = egressapi.Traffic{Host: overflow, Count: 1, Sent: e.Sent, Received: e.Received}
	}
	s.Requests = append(s.Requests, t)
}

// overflow stands for the host of the requests past a summary's bound.
const overflow = "(others)"

// maxPath is how much of a path a summary keeps.
const maxPath = 200

// clip returns path cut to maxPath bytes.
func clip(path string) string {
	if len(path) <= maxPath {
		return path
	}
	return strings.ToValidUTF8(path[:maxPath], "") + "…"
}

func addPath(t *egressapi.Traffic, path string) {
	if path == "" || len(t.Paths) >= egressapi.MaxPaths {
		return
	}
	path = clip(path)
	for _, p := range t.Paths {
		if p == path {
			return
		}
	}
	t.Paths = append(t.Paths, path)
}

// drain returns what the session's sandbox sent since the last drain, and
// forgets it; nil when nothing.
func (a *audit) drain(tenant string, session uuid.UUID) *egressapi.Summary {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := sessionKey{tenant, session}
	s := a.sessions[k]
	delete(a.sessions, k)
	return s
}

// forget drops what a closed session's sandbox left undrained.
func (a *audit) forget(tenant string, session uuid.UUID) { a.drain(tenant, session) }
