package event

import (
	"fmt"
	"strings"

	"github.com/google/uuid"
)

// EgressSummary is what a sandbox's requests did during one tool call, as
// the egress service sums it up and [ToolCompleted.Egress] records it: the
// requests grouped by where they went and how they ended, and the
// refusals. It is recorded with the call's result, so that the session
// log holds one summary per call rather than an event per request.
type EgressSummary struct {
	Requests []EgressTraffic `json:"requests,omitempty"`
	Refused  []EgressRefusal `json:"refused,omitempty"`
}

// EgressTraffic is every request of one kind: to one host and port, with one
// scheme, method and status. Method and Paths are known for requests the
// egress service read (plain HTTP, or HTTPS it terminated); a tunnelled
// connection has method CONNECT and no paths.
type EgressTraffic struct {
	Scheme string `json:"scheme"`
	Host   string `json:"host"`
	Port   int    `json:"port"`
	Method string `json:"method"`
	Status int    `json:"status"`
	Count  int    `json:"count"`
	// Sent and Received count the bytes of the bodies (or, for a tunnel,
	// of the connection) each way.
	Sent     int64 `json:"sent"`
	Received int64 `json:"received"`
	// Paths are the first few distinct paths, without the query.
	Paths []string `json:"paths,omitempty"`
	// Rule is the rule that allowed the requests, "" for an approved one.
	Rule string `json:"rule,omitempty"`
}

// EgressMaxPaths is how many paths an [EgressTraffic] keeps.
const EgressMaxPaths = 10

// EgressRefusal is a request the egress service refused, with why.
type EgressRefusal struct {
	Scheme string `json:"scheme"`
	Host   string `json:"host"`
	Port   int    `json:"port"`
	Method string `json:"method,omitempty"`
	Path   string `json:"path,omitempty"`
	// Rule is the rule that refused it, "" when none allowed it.
	Rule   string `json:"rule,omitempty"`
	Reason string `json:"reason"`
	// Approval is set when the request waits for a reviewer: the same
	// request, retried once it is approved, passes once.
	Approval uuid.UUID `json:"approval,omitzero"`
	Count    int       `json:"count"`
}

// Empty reports whether nothing went out or was refused.
func (s *EgressSummary) Empty() bool {
	return s == nil || len(s.Requests) == 0 && len(s.Refused) == 0
}

// maxEgressNoted is how many refusals a note names.
const maxEgressNoted = 5

// Note is the short note a Bash result ends with when requests were
// refused: which hosts, by which rule and why, so that the model stops
// retrying or asks for what it needs. It is "" when none were.
func (s *EgressSummary) Note() string {
	if s == nil || len(s.Refused) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("[egress] requests refused:")
	for i, r := range s.Refused {
		if i == maxEgressNoted {
			fmt.Fprintf(&b, "\n- and %d more", len(s.Refused)-i)
			break
		}
		target := r.Host
		if r.Port != 0 && r.Port != 80 && r.Port != 443 {
			target = fmt.Sprintf("%s:%d", r.Host, r.Port)
		}
		if r.Method != "" && r.Method != "CONNECT" {
			target = r.Method + " " + r.Scheme + "://" + target + r.Path
		}
		b.WriteString("\n- " + target)
		if r.Count > 1 {
			fmt.Fprintf(&b, " (%d times)", r.Count)
		}
		switch {
		case r.Approval != uuid.Nil:
			fmt.Fprintf(&b, ": held for a reviewer (approval %s, rule %s): retry the same request once it is approved", r.Approval, r.Rule)
		case r.Rule != "":
			fmt.Fprintf(&b, ": refused by rule %s: %s", r.Rule, r.Reason)
		default:
			fmt.Fprintf(&b, ": %s", r.Reason)
		}
	}
	return b.String()
}
