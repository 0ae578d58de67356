package core

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"

	"corral.dev/pkg/event"
	"corral.dev/pkg/policy"
)

// goldenLine is one event of a golden log, as the chaos test writes them
// (go test -run 'TestChaos$' ./services/corral -args -chaos.golden=DIR).
// The logs v1-* were written by an earlier version, which marked the
// calls it dispatched with a response in the response itself; v2-*
// record every dispatch as a tool.dispatched event. Both are read alike.
type goldenLine struct {
	Seq     uint64          `json:"seq"`
	Subject string          `json:"subject"`
	Event   json.RawMessage `json:"event"`
}

// Each event a harness wrote in a real run under crashes and restarts
// (testdata/golden: the chaos test's logs) is what Next decided on the
// log as it stood at some point since the harness's previous event: the
// events of others (results, stops) may come in between.
func TestGoldenLogs(t *testing.T) {
	files, err := filepath.Glob("testdata/golden/*.jsonl")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden logs: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			lines := readGolden(t, file)
			var st *State
			var since [][]Action // what Next decided after each event since the harness's last
			for _, l := range lines {
				v, err := event.Parse(l.Event)
				if err != nil {
					t.Fatalf("seq %d: %v", l.Seq, err)
				}
				ev := v.(event.Event)
				h := ev.Head()
				if st == nil {
					st = New(h.Tenant, h.Session)
				}
				env := Env{Policy: policy.Default(), MaxTurns: 50, Now: h.Time, RequeueAfter: NoRequeue}
				if strings.HasSuffix(l.Subject, ".harness") {
					if what, ok := decided(ev); ok && !explains(since, ev) {
						t.Errorf("seq %d: %s %s is not what Next decided since the harness's last event: %s", l.Seq, h.Type, what, showAll(since))
					}
					since = nil
				}
				st.Apply(l.Seq, ev)
				since = append(since, Next(st, env))
			}
			if st.Status != StatusCompleted {
				t.Errorf("the golden log ends with its session %v, want it completed", st.Status)
			}
		})
	}
}

func readGolden(t *testing.T, file string) []goldenLine {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []goldenLine
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l goldenLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// decided reports whether ev, written by the harness, is one a step writes
// as Next decides it, and says which call it is about.
func decided(ev event.Event) (string, bool) {
	switch e := ev.(type) {
	case *event.ModelResponded, *event.SessionCompleted, *event.ContextCompacted:
		return "", true
	case *event.ToolDispatched:
		return e.Call.String(), true
	case *event.ApprovalRequested:
		return e.Call.String(), true
	case *event.ToolCompleted:
		return e.Call.String(), true // a refusal: the harness writes no other result
	case *event.SessionFailed:
		return e.Code, e.Code == CodeTurnLimit || e.Code == CodeBudget
	case *event.SessionPaused:
		return e.Budget, true
	case *event.SessionResumed:
		return e.Raise.String(), true
	}
	return "", false
}

// explains reports whether an action decided since the harness's last
// event is what ev records.
func explains(since [][]Action, ev event.Event) bool {
	for _, acts := range since {
		for _, a := range acts {
			if records(a, ev) {
				return true
			}
		}
	}
	return false
}

func records(a Action, ev event.Event) bool {
	call := func(c event.Call, id uuid.UUID) bool { return c.ID == id }
	switch e := ev.(type) {
	case *event.ModelResponded:
		_, ok := a.(AskModel)
		return ok
	case *event.SessionCompleted:
		_, ok := a.(Complete)
		return ok
	case *event.ContextCompacted:
		c, ok := a.(Compact)
		return ok && c.ClearThrough == e.ClearedThrough && c.SummarizeThrough == e.SummarizedThrough
	case *event.ToolDispatched:
		switch a := a.(type) {
		case Dispatch:
			return !a.Recorded && call(a.Call, e.Call) && a.Service == e.Service
		case RecordDispatched:
			return call(a.Call, e.Call) && a.Service == e.Service
		}
	case *event.ApprovalRequested:
		h, ok := a.(Hold)
		return ok && !h.Asked && call(h.Call, e.Call)
	case *event.ToolCompleted:
		r, ok := a.(Refuse)
		return ok && call(r.Call, e.Call) && e.Output == "Error: "+r.Reason
	case *event.SessionFailed:
		f, ok := a.(Fail)
		return ok && f.Code == e.Code && f.Budget == e.Budget
	case *event.SessionPaused:
		p, ok := a.(Pause)
		return ok && p.Budget == e.Budget
	case *event.SessionResumed:
		r, ok := a.(Resume)
		return ok && r.Raise == e.Raise
	}
	return false
}

func showAll(since [][]Action) string {
	var out []string
	for _, acts := range since {
		out = append(out, "["+show(acts)+"]")
	}
	return strings.Join(out, " ")
}
