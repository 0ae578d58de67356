package slackbridge

import (
	"slices"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
)

// threadTTL is how long a thread is remembered after its last change. A
// thread forgotten and written in again goes on with the same session (its
// ID is derived from the thread), from the log's end.
const threadTTL = 90 * 24 * time.Hour

// waitFor is how long a request published for a thread keeps the bridge
// following its session before the harness has recorded it: as long as
// the requests stream drops duplicates, longer than any restart.
const waitFor = time.Hour

// thread is a Slack thread and the session it is, as kept in [Bucket]
// under <tenant>.thread.<session>.
type thread struct {
	Session uuid.UUID `json:"session"`
	Tenant  string    `json:"tenant"`
	Team    string    `json:"team"`
	Channel string    `json:"channel"`
	// TS is the thread's ts: its first message's.
	TS string `json:"ts"`
	// User is the session's user: who started the thread. Everyone's
	// follow-ups in the thread are requests of this user, the only one
	// the harness lets continue the session.
	User string `json:"user,omitempty"`

	// Seq is the stream sequence of the last event of the session whose
	// effect in Slack is done.
	Seq uint64 `json:"seq"`
	// Posting is the sequence of the event whose message is being posted:
	// set before chat.postMessage, cleared with Seq after. A bridge that
	// finds it set looks in the thread for the message (its metadata
	// names the event) before posting again.
	Posting uint64 `json:"posting,omitempty"`
	// Waiting are requests published for the thread that the session's
	// log has not shown yet, with when they were published.
	Waiting map[uuid.UUID]time.Time `json:"waiting,omitempty"`
	// Busy is set while a request is worked on: from its session.requested
	// to the session's end.
	Busy bool `json:"busy,omitempty"`
	// Status is the ts of the current request's progress message, Calls
	// and Last what it says.
	Status string `json:"status,omitempty"`
	Calls  int    `json:"calls,omitempty"`
	Last   string `json:"last,omitempty"`
	// Seen are the last requests the session's log showed.
	Seen []uuid.UUID `json:"seen,omitempty"`
	// Approvals maps the calls waiting for a reviewer to the message with
	// their buttons.
	Approvals map[uuid.UUID]approvalMsg `json:"approvals,omitempty"`
}

// approvalMsg is a message asking for an approval: its ts, and what it
// says of the call.
type approvalMsg struct {
	TS   string `json:"ts"`
	Text string `json:"text"`
}

// maxSeen is how many of the last requests a thread remembers.
const maxSeen = 32

// ref names the thread's session.
func (t *thread) ref() sessionRef { return sessionRef{Tenant: t.Tenant, ID: t.Session} }

// seen reports whether the session's log showed request req.
func (t *thread) seen(req uuid.UUID) bool { return slices.Contains(t.Seen, req) }

// saw notes that the session's log showed request req.
func (t *thread) saw(req uuid.UUID) {
	delete(t.Waiting, req)
	if !t.seen(req) {
		t.Seen = append(t.Seen, req)
	}
	if len(t.Seen) > maxSeen {
		t.Seen = t.Seen[len(t.Seen)-maxSeen:]
	}
}

// open reports whether the thread's session is to be followed: a request
// is worked on or was published not long ago.
func (t *thread) open(now time.Time) bool {
	if t.Busy {
		return true
	}
	for _, at := range t.Waiting {
		if now.Sub(at) < waitFor {
			return true
		}
	}
	return false
}

// expiry returns when the thread stops being open if nothing happens.
func (t *thread) expiry() time.Time {
	var last time.Time
	for _, at := range t.Waiting {
		if at.After(last) {
			last = at
		}
	}
	return last.Add(waitFor)
}

// sessionRef names a session: by its ID alone it could be another
// tenant's.
type sessionRef struct {
	Tenant string
	ID     uuid.UUID
}

// key is the session's key in maps ([bus.SessionKey]).
func (r sessionRef) key() string { return bus.SessionKey(r.Tenant, r.ID) }
