package sessionindex

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/event"
	"corral.dev/pkg/model"
)

var (
	session = uuid.MustParse("01a2146f-eb49-73ee-ae87-2d89f74e5943")
	t0      = time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
)

// at returns a header of typ of the test's session, n seconds after t0.
func at(typ string, n int) event.Header {
	h := event.NewHeader(typ, "acme", session)
	h.Time = t0.Add(time.Duration(n) * time.Second)
	return h
}

func requested(n int, user, model, prompt string) event.Event {
	return &event.SessionRequested{Header: at(event.TypeSessionRequested, n), User: user, Model: model, Prompt: prompt, Environment: "py"}
}

func responded(n, turn, in, out int) event.Event {
	return &event.ModelResponded{Header: at(event.TypeModelResponded, n), Turn: turn, Model: "openai:m", Usage: model.Usage{InputTokens: in, OutputTokens: out}}
}

// price is a dollar per thousand tokens, in or out.
func price(_ string, u model.Usage) float64 { return float64(u.InputTokens+u.OutputTokens) / 1000 }

func TestFold(t *testing.T) {
	t.Parallel()
	held, other := uuid.New(), uuid.New()
	tests := []struct {
		name   string
		events []event.Event
		want   Entry
	}{
		{
			name:   "a request",
			events: []event.Event{requested(0, "ada", "openai:m", "\n  fix   the tests\nthen lint")},
			want:   Entry{User: "ada", Status: Running, Model: "openai:m", Title: "fix the tests", Environment: "py", Started: t0, LastEvent: t0, Requests: 1},
		},
		{
			name: "a turn counted and priced, then completed",
			events: []event.Event{requested(0, "ada", "openai:m", "go"), responded(2, 1, 1000, 500), responded(3, 2, 2000, 0),
				&event.SessionCompleted{Header: at(event.TypeSessionCompleted, 4)}},
			want: Entry{User: "ada", Status: Completed, Model: "openai:m", Turns: 2, CostUSD: 3.5, InputTokens: 3000, OutputTokens: 500,
				Title: "go", Environment: "py", Started: t0, LastEvent: t0.Add(4 * time.Second), Requests: 1},
		},
		{
			name: "waiting for a reviewer until the last held call is decided",
			events: []event.Event{requested(0, "ada", "openai:m", "go"),
				&event.ApprovalRequested{Header: at(event.TypeApprovalRequested, 1), Call: held},
				&event.ApprovalRequested{Header: at(event.TypeApprovalRequested, 1), Call: other},
				&event.ApprovalDecided{Header: at(event.TypeApprovalDecided, 2), Call: other}},
			want: Entry{User: "ada", Status: Waiting, Model: "openai:m", Title: "go", Environment: "py", Started: t0, LastEvent: t0.Add(2 * time.Second), Held: []uuid.UUID{held}, Requests: 1},
		},
		{
			name: "running again once decided",
			events: []event.Event{requested(0, "ada", "openai:m", "go"),
				&event.ApprovalRequested{Header: at(event.TypeApprovalRequested, 1), Call: held},
				&event.ApprovalDecided{Header: at(event.TypeApprovalDecided, 2), Call: held}},
			want: Entry{User: "ada", Status: Running, Model: "openai:m", Title: "go", Environment: "py", Started: t0, LastEvent: t0.Add(2 * time.Second), Held: []uuid.UUID{}, Requests: 1},
		},
		{
			name: "failed, then a follow-up keeps the first request's title and user",
			events: []event.Event{requested(0, "ada", "openai:m", "first"),
				&event.SessionFailed{Header: at(event.TypeSessionFailed, 1), Code: event.CodeModelError, Reason: "down"},
				requested(5, "ada", "anthropic:c", "second")},
			want: Entry{User: "ada", Status: Running, Model: "anthropic:c", Title: "first", Environment: "py", Started: t0, LastEvent: t0.Add(5 * time.Second), Requests: 2},
		},
		{
			name: "failed",
			events: []event.Event{requested(0, "ada", "openai:m", "go"),
				&event.SessionFailed{Header: at(event.TypeSessionFailed, 1), Code: event.CodeModelError, Reason: "down"}},
			want: Entry{User: "ada", Status: Failed, Model: "openai:m", Title: "go", Environment: "py", Started: t0, LastEvent: t0.Add(time.Second), Code: event.CodeModelError, Reason: "down", Requests: 1},
		},
		{
			name: "stopped while a call was held",
			events: []event.Event{requested(0, "ada", "openai:m", "go"),
				&event.ApprovalRequested{Header: at(event.TypeApprovalRequested, 1), Call: held},
				&event.SessionStopped{Header: at(event.TypeSessionStopped, 2), By: "ada", Reason: "enough"}},
			want: Entry{User: "ada", Status: Stopped, Model: "openai:m", Title: "go", Environment: "py", Started: t0, LastEvent: t0.Add(2 * time.Second), Reason: "enough", Requests: 1},
		},
		{
			name: "paused over a budget, then resumed; a compaction's summary costs as a turn does",
			events: []event.Event{requested(0, "ada", "openai:m", "go"),
				&event.SessionPaused{Header: at(event.TypeSessionPaused, 1), Budget: "session.steps", Reason: "10 steps"},
				&event.ContextCompacted{Header: at(event.TypeContextCompacted, 2), Model: "openai:m", Usage: model.Usage{InputTokens: 100}},
				&event.SessionResumed{Header: at(event.TypeSessionResumed, 3)}},
			want: Entry{User: "ada", Status: Running, Model: "openai:m", Title: "go", Environment: "py", Started: t0, LastEvent: t0.Add(3 * time.Second), InputTokens: 100, CostUSD: 0.1, Requests: 1},
		},
		{
			name: "paused",
			events: []event.Event{requested(0, "ada", "openai:m", "go"),
				&event.SessionPaused{Header: at(event.TypeSessionPaused, 1), Budget: "session.steps", Reason: "10 steps"}},
			want: Entry{User: "ada", Status: Paused, Model: "openai:m", Title: "go", Environment: "py", Started: t0, LastEvent: t0.Add(time.Second), Reason: "10 steps", Requests: 1},
		},
		{
			name:   "an invalid request fails a session that has no request",
			events: []event.Event{&event.SessionFailed{Header: at(event.TypeSessionFailed, 1), Code: event.CodeInvalidRequest, Reason: "/prompt: missing"}},
			want:   Entry{Status: Failed, LastEvent: t0.Add(time.Second), Code: event.CodeInvalidRequest, Reason: "/prompt: missing"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got Entry
			for i, ev := range tc.events {
				given := got
				held := slices.Clone(got.Held)
				got = Fold(got, ev, uint64(i+1), price)
				if !slices.Equal(given.Held, held) {
					t.Errorf("Fold changed the held calls of the entry it was given: %v, were %v", given.Held, held)
				}
			}
			want := tc.want
			want.Tenant, want.Session, want.Seq = "acme", session, uint64(len(tc.events))
			if !same(got, want) {
				t.Errorf("Fold:\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

// same compares entries, a nil and an empty list of held calls alike.
func same(a, b Entry) bool {
	return slices.Equal(a.Held, b.Held) && reflect.DeepEqual(withoutHeld(a), withoutHeld(b))
}

func withoutHeld(e Entry) Entry {
	e.Held = nil
	return e
}

func TestTitle(t *testing.T) {
	t.Parallel()
	long := ""
	for range 20 {
		long += "word "
	}
	for _, tc := range []struct{ prompt, want string }{
		{"", ""},
		{"  \n\t\n", ""},
		{"fix it", "fix it"},
		{"\n\n  fix\tthe   tests \nand more", "fix the tests"},
		{long, long[:MaxTitle-1] + "…"},
	} {
		if got := Title(tc.prompt); got != tc.want {
			t.Errorf("Title(%q) = %q, want %q", tc.prompt, got, tc.want)
		}
	}
}

func TestSelect(t *testing.T) {
	t.Parallel()
	mk := func(user string, st Status, n int) Entry {
		return Entry{Session: uuid.New(), User: user, Status: st, LastEvent: t0.Add(time.Duration(n) * time.Hour)}
	}
	all := []Entry{mk("ada", Running, 1), mk("bob", Completed, 5), mk("ada", Failed, 3), mk("ada", Completed, 4)}
	SortRecent(all)
	if !slices.IsSortedFunc(all, func(a, b Entry) int { return b.LastEvent.Compare(a.LastEvent) }) {
		t.Fatalf("SortRecent left them %v", all)
	}
	count := func(f Filter) int { return len(Select(all, f)) }
	for _, tc := range []struct {
		name string
		f    Filter
		want int
	}{
		{"all", Filter{}, 4},
		{"ada's", Filter{User: "ada"}, 3},
		{"completed", Filter{Statuses: []Status{Completed}}, 2},
		{"ada's completed or failed", Filter{User: "ada", Statuses: []Status{Completed, Failed}}, 2},
		{"since", Filter{Since: t0.Add(3 * time.Hour)}, 3},
		{"the latest two", Filter{Limit: 2}, 2},
	} {
		if got := count(tc.f); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
	if got := Select(all, Filter{Limit: 1}); got[0].User != "bob" {
		t.Errorf("the latest is %+v, want bob's", got[0])
	}
	if _, err := CheckStatus("idle"); err == nil {
		t.Errorf("CheckStatus(idle) = nil, want an error naming the statuses")
	}
}
