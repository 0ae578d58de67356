package sessionlog

import (
	"encoding/json"
	"errors"
	"fmt"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
)

// Reasons an event is rejected: the label values of
// corral_sessionlog_rejected_total, a closed set.
const (
	ReasonSubject      = "bad_subject"
	ReasonUndecodable  = "undecodable"
	ReasonType         = "type_mismatch"
	ReasonTenant       = "tenant_mismatch"
	ReasonSession      = "session_mismatch"
	ReasonWriter       = "writer_not_allowed"
	ReasonService      = "service_mismatch"
	ReasonNotDispatch  = "not_dispatched"
	ReasonUnresolvable = "unresolvable"
	ReasonHash         = "args_hash_mismatch"
	ReasonReplayed     = "replayed"
	ReasonSpoofed      = "spoofed_header"
)

// Rejection is why an event was rejected.
type Rejection struct {
	// Reason is one of the Reason constants.
	Reason string
	Detail string
}

func (r *Rejection) Error() string { return r.Reason + ": " + r.Detail }

// Is makes a rejection match [ErrRejected].
func (r *Rejection) Is(target error) bool { return target == bus.ErrRejected }

func reject(reason, format string, args ...any) error {
	return &Rejection{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// Reject returns an error rejecting an event for reason (one of the Reason
// constants), for checks made outside this package on what it returned.
func Reject(reason, format string, args ...any) error { return reject(reason, format, args...) }

// ReasonOf returns the reason of a rejection, or "" for another error.
func ReasonOf(err error) string {
	if r, ok := errors.AsType[*Rejection](err); ok {
		return r.Reason
	}
	return ""
}

// Check decodes data, the body of an event stored at a, and judges it by
// what the subject says (see the package doc): the type the subject names,
// the subject's tenant and session, a writer allowed to write that kind, a
// tool result's service, an approval request's tool (egress's and only
// egress's is "egress"). data must be resolved already
// (see [Log]); a stub is judged by the type it stands for. Errors match
// [ErrRejected].
func Check(a Address, data []byte) (event.Event, error) {
	if !mayWrite(a.Writer, a.Type) {
		return nil, reject(ReasonWriter, "%s may not write %s", a.Writer, a.Type)
	}
	var probe struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, reject(ReasonUndecodable, "%v", err)
	}
	if probe.Type != a.Type {
		return nil, reject(ReasonType, "a %q body on a subject of %s", probe.Type, a.Type)
	}
	v, err := event.Parse(data)
	if err != nil {
		return nil, reject(ReasonUndecodable, "%v", err)
	}
	ev, ok := v.(event.Event)
	if !ok {
		return nil, reject(ReasonType, "%s is not a session event", a.Type)
	}
	h := ev.Head()
	switch {
	case h.Tenant != a.Tenant:
		return nil, reject(ReasonTenant, "body names tenant %q on a subject of tenant %q", h.Tenant, a.Tenant)
	case h.Session != a.Session:
		return nil, reject(ReasonSession, "body names session %s on a subject of session %s", h.Session, a.Session)
	}
	switch e := ev.(type) {
	case *event.ToolCompleted:
		want := string(a.Writer)
		if a.Writer == Harness {
			want = "" // a call the harness refused ran nowhere
		}
		if e.Service != want {
			return nil, reject(ReasonService, "a result of service %q written by %s", e.Service, a.Writer)
		}
	case *event.ApprovalRequested:
		// Egress asks about the requests it holds, and only about them;
		// the harness about calls, never in egress's name.
		if (a.Writer == Egress) != (e.Tool == event.EgressTool) {
			return nil, reject(ReasonWriter, "an approval request for tool %q written by %s", e.Tool, a.Writer)
		}
	}
	return ev, nil
}
