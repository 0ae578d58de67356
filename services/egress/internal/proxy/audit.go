package proxy

import (
	"github.com/google/uuid"

	"corral.dev/pkg/egressapi"
)

// Recorder takes what went out of a sandbox: one [Entry] per request read,
// per tunnel and per refusal. Record is called once the request has ended
// (for a tunnel, once the connection has closed); it must be safe for
// concurrent use and must not block for long.
type Recorder interface {
	Record(id egressapi.Identity, e Entry)
}

// Entry is one request, tunnel or refusal.
type Entry struct {
	Target
	// Status is the upstream's status; 0 for a tunnel, 403 for a refusal,
	// 502 when the upstream could not be reached.
	Status int
	// Sent and Received count the bytes of the request and response
	// bodies (for a tunnel, of the connection, each way).
	Sent, Received int64
	Verdict        Verdict
	// Approval is the approval a held request waits on, or the one it
	// passed with.
	Approval uuid.UUID
	// Refused is set when the proxy refused the request or connection;
	// Reason then says why. Reason also says why an upstream failed.
	Refused bool
	Reason  string
}
