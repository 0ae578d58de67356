// Package sessionindex is the index of sessions: one [Entry] per session,
// kept in the KV bucket [bus.BucketSessions] under <tenant>.<session>, with
// what a list of sessions shows (user, status, model, turns, cost, when it
// started and last changed, a title from its prompt).
//
// The index is derived from the session logs and from nothing else: the
// gateway, the only identity the NATS permissions let write the bucket,
// folds every event that [corral.dev/pkg/sessionlog] accepts into its
// session's entry with [Fold]. Clients read their own tenant's keys, as they
// read their tenant's session logs; the tenant and session of an entry are
// its key's, never what its body says.
package sessionindex

import (
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/event"
	"corral.dev/pkg/model"
)

// Status is where a session stands, as its log says.
type Status string

// Statuses.
const (
	// Running: a request is being worked on.
	Running Status = "running"
	// Waiting: idle until a reviewer decides a call (or a request egress
	// held) the policy holds.
	Waiting Status = "waiting"
	// Completed: the last request was answered; a follow-up runs it
	// again.
	Completed Status = "completed"
	// Failed: the session cannot go on (Code and Reason say why).
	Failed Status = "failed"
	// Stopped: someone stopped it; a follow-up starts it again.
	Stopped Status = "stopped"
	// Paused: a budget paused it until a reviewer raises it.
	Paused Status = "paused"
)

// Statuses lists every status, in the order a person reads them.
func Statuses() []Status {
	return []Status{Running, Waiting, Paused, Completed, Failed, Stopped}
}

// Ended reports whether s is the end of a request: nothing runs until a
// follow-up.
func (s Status) Ended() bool { return s == Completed || s == Failed || s == Stopped }

// Entry is a session as the index keeps it. Its JSON field names are
// stable: `corral sessions --json` prints them as they are.
type Entry struct {
	Tenant  string    `json:"tenant"`
	Session uuid.UUID `json:"session"`
	User    string    `json:"user"`
	Status  Status    `json:"status"`
	// Model is the model of its last request, with its provider prefix.
	Model string `json:"model"`
	// Turns counts its model responses.
	Turns int `json:"turns"`
	// CostUSD prices each response by the price table of the gateway's
	// policy when it was indexed.
	CostUSD      float64 `json:"cost_usd"`
	InputTokens  int     `json:"input_tokens"`
	OutputTokens int     `json:"output_tokens"`
	// Started is when its first request was taken, LastEvent when its
	// last event was recorded.
	Started   time.Time `json:"started"`
	LastEvent time.Time `json:"last_event"`
	// Title is the first line of its first prompt, trimmed.
	Title string `json:"title"`
	// Environment is the environment it runs in, if any.
	Environment string `json:"environment,omitempty"`
	// Code and Reason say why it failed or was stopped (Code is a
	// failure's code; a stop's is empty).
	Code   string `json:"code,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Held are the calls (or egress's requests) waiting for a reviewer.
	Held []uuid.UUID `json:"held,omitempty"`
	// Requests counts the requests it took (the first and follow-ups).
	Requests int `json:"requests"`
	// Seq is the stream sequence of the last event folded in.
	Seq uint64 `json:"seq"`
}

// Key is the key of a session's entry in [bus.BucketSessions].
func Key(tenant string, session uuid.UUID) string {
	return tenant + "." + session.String()
}

// MaxTitle is how many characters of its prompt a title keeps.
const MaxTitle = 80

// Title is the title of a session whose first prompt is prompt: its first
// line that is not blank, trimmed, at most [MaxTitle] characters.
func Title(prompt string) string {
	for line := range strings.Lines(prompt) {
		line = strings.Join(strings.Fields(line), " ")
		if line == "" {
			continue
		}
		if r := []rune(line); len(r) > MaxTitle {
			return string(r[:MaxTitle-1]) + "…"
		}
		return line
	}
	return ""
}

// Pricer prices a model response's usage in USD.
type Pricer func(model string, u model.Usage) float64

// Fold returns e with the event ev, recorded at stream sequence seq, folded
// in. e is a session's entry as folded up to an earlier event (the zero
// Entry for none); ev must be one the session log accepted, of e's tenant
// and session. Fold is pure: it changes nothing but its result.
func Fold(e Entry, ev event.Event, seq uint64, price Pricer) Entry {
	h := ev.Head()
	e.Tenant, e.Session, e.Seq = h.Tenant, h.Session, seq
	if h.Time.After(e.LastEvent) {
		e.LastEvent = h.Time
	}
	switch ev := ev.(type) {
	case *event.SessionRequested:
		if e.Requests == 0 {
			e.User, e.Started, e.Title = ev.User, h.Time, Title(ev.Prompt)
			e.Environment = ev.Environment
		}
		e.Requests++
		e.Model, e.Status, e.Code, e.Reason, e.Held = ev.Model, Running, "", "", nil
	case *event.ModelResponded:
		e.Turns = max(e.Turns, ev.Turn)
		e.InputTokens += max(ev.Usage.InputTokens, 0)
		e.OutputTokens += max(ev.Usage.OutputTokens, 0)
		if price != nil {
			e.CostUSD += price(ev.Model, ev.Usage)
		}
	case *event.ApprovalRequested:
		if !slices.Contains(e.Held, ev.Call) {
			e.Held = append(slices.Clone(e.Held), ev.Call)
		}
		if !e.Status.Ended() {
			e.Status = Waiting
		}
	case *event.ApprovalDecided:
		e.Held = slices.DeleteFunc(slices.Clone(e.Held), func(id uuid.UUID) bool { return id == ev.Call })
		if e.Status == Waiting && len(e.Held) == 0 {
			e.Status = Running
		}
	case *event.SessionCompleted:
		e.Status, e.Held = Completed, nil
	case *event.SessionFailed:
		e.Status, e.Code, e.Reason, e.Held = Failed, ev.Code, ev.Reason, nil
	case *event.SessionStopped:
		e.Status, e.Code, e.Reason, e.Held = Stopped, "", ev.Reason, nil
	case *event.SessionPaused:
		e.Status, e.Code, e.Reason = Paused, "", ev.Reason
	case *event.SessionResumed:
		if e.Status == Paused {
			e.Status, e.Reason = Running, ""
		}
	case *event.ContextCompacted:
		// The summary's call costs as a response does; it is no turn.
		e.InputTokens += max(ev.Usage.InputTokens, 0)
		e.OutputTokens += max(ev.Usage.OutputTokens, 0)
		if price != nil && ev.Model != "" {
			e.CostUSD += price(ev.Model, ev.Usage)
		}
	}
	return e
}
