package core

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	"corral.dev/pkg/event"
	"corral.dev/pkg/model"
	"corral.dev/pkg/policy"
)

// compactPolicy runs every call and prices nothing.
const compactPolicy = "rules: []\n"

// testContext is a small window: 9,000 tokens of input, compacted past
// 6,750 down to 4,500.
var testContext = Context{Window: 10000, Output: 1000, Threshold: 0.75, Target: 0.5, KeepResults: 2, Overhead: 100, SummaryTokens: 500}

// big is a result of 8,000 bytes: 2,000 tokens.
var big = strings.Repeat("0123456789abcdef", 500)

// work records turns each making one Bash call with a big result, each
// response reporting what its request took as the estimates count it.
func (l *log) work(turns int) *log {
	for range turns {
		st := l.fold()
		id := fmt.Sprintf("c%d", l.turn+1)
		l.respond("sandbox", id+":Bash:"+bashTrue)
		l.events[len(l.events)-1].(*event.ModelResponded).Usage = model.Usage{InputTokens: 100 + size(st.Conversation())/bytesPerToken, OutputTokens: 10}
		l.result(id, big)
	}
	return l
}

func (l *log) compacted(cleared, summarized int, summary string) *log {
	return l.add(&event.ContextCompacted{Header: header(event.TypeContextCompacted), Turn: l.turn, ClearedThrough: cleared, SummarizedThrough: summarized,
		Summary: summary, Model: "openai:m", Usage: model.Usage{InputTokens: 1000, OutputTokens: 100}, User: "ada"})
}

// showCompact is show, with compactions.
func showCompact(acts []Action) string {
	var out []string
	for _, a := range acts {
		if c, ok := a.(Compact); ok {
			out = append(out, fmt.Sprintf("compact(clear through %d, summarize through %d)", c.ClearThrough, c.SummarizeThrough))
			continue
		}
		out = append(out, show([]Action{a}))
	}
	return strings.Join(out, "; ")
}

func TestNextCompacts(t *testing.T) {
	pol, err := policy.Parse([]byte(compactPolicy))
	if err != nil {
		t.Fatal(err)
	}
	env := Env{Policy: pol, MaxTurns: 100, Now: t0, RequeueAfter: NoRequeue, Context: testContext}
	for _, tc := range []struct {
		name string
		log  *log
		env  func(*Env)
		want string
	}{
		{"under the threshold the model is asked", new(log).request("go").work(3), nil,
			"ask(7 messages, last user: " + big + ")"},
		{"over it the older results are cleared, the most recent two kept", new(log).request("go").work(4), nil,
			"compact(clear through 2, summarize through 0)"},
		{"with no window nothing is compacted", new(log).request("go").work(4), func(e *Env) { e.Context = Context{} },
			"ask(9 messages, last user: " + big + ")"},
		{"a compaction recorded: the model is asked, and no second compaction made", new(log).request("go").work(4).compacted(2, 0, ""), nil,
			"ask(9 messages, last user: " + big + ")"},
		{"clearing not enough: the older turns are summarised", new(log).request("go").work(4), func(e *Env) { e.Context.KeepResults = 10 },
			"compact(clear through 0, summarize through 3)"},
		{"the summary recorded: the model is asked with it", new(log).request("go").work(4).compacted(0, 3, "so far so good"), func(e *Env) { e.Context.KeepResults = 10 },
			"ask(3 messages, last user: " + big + ")"},
		{"still over after a compaction: the model is asked all the same", new(log).request("go").work(4).compacted(0, 0, ""), func(e *Env) { e.Context.KeepResults = 10 },
			"ask(9 messages, last user: " + big + ")"},
		{"once the conversation grew, compacted again", new(log).request("go").work(4).compacted(2, 0, "").work(2), nil,
			"compact(clear through 4, summarize through 0)"},
		{"a single turn over the window: nothing to compact, the model is asked", new(log).request(strings.Repeat("x", 40000)), nil,
			"ask(1 messages, last user: " + strings.Repeat("x", 40000) + ")"},
		{"the calls of a turn run before any compaction", new(log).request("go").work(4).respond("", "n:Bash:"+bashTrue), nil,
			"dispatch n to sandbox"},
		{"a follow-up is compacted with the rest", new(log).request("go").work(4).add(&event.SessionCompleted{Header: header(event.TypeSessionCompleted)}).request("more"), nil,
			"compact(clear through 2, summarize through 0)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := env
			if tc.env != nil {
				tc.env(&e)
			}
			if got := showCompact(Next(tc.log.fold(), e)); got != tc.want {
				t.Errorf("Next =\n  %.300s\nwant\n  %.300s", got, tc.want)
			}
		})
	}
}

// The fold applies a compaction: the results cleared read as notes naming
// their calls, the turns summarised as the summary, and no tool_result is
// parted from its tool_use.
func TestCompactionFolds(t *testing.T) {
	l := new(log).request("go").work(5)
	before, _ := json.Marshal(l.fold().Conversation())
	l.compacted(3, 0, "")
	st := l.fold()
	msgs := st.Conversation()
	var cleared, whole int
	for _, m := range msgs {
		for _, b := range m.Content {
			switch {
			case b.Type != model.ToolResultBlock:
			case b.Content == big:
				whole++
			case strings.Contains(b.Content, "is in the session log, call "+l.calls[fmt.Sprintf("c%d", cleared+1)].ID.String()):
				cleared++
			default:
				t.Errorf("a result reads %q", b.Content)
			}
		}
	}
	if cleared != 3 || whole != 2 {
		t.Errorf("%d results cleared and %d whole, want 3 and 2", cleared, whole)
	}
	if r := st.Results[l.calls["c1"].ID]; r.Output != big {
		t.Errorf("the record of a cleared call changed: %.40q", r.Output)
	}
	// The conversation the model was asked with before the compaction,
	// which shares the state's messages, is not changed by folding it.
	old := new(log)
	old.events = l.events[:len(l.events)-1]
	st = old.fold()
	asked := st.Conversation()
	st.Apply(uint64(len(l.events)), l.events[len(l.events)-1])
	if after, _ := json.Marshal(asked); string(after) != string(before) {
		t.Error("folding a compaction changed the conversation the model was asked with before it")
	}

	l.work(1).compacted(3, 4, "the summary")
	msgs = l.fold().Conversation()
	if len(msgs) != 5 || msgs[0].Role != model.User || !strings.HasSuffix(msgs[0].Content[0].Text, "\n\nthe summary") {
		t.Fatalf("after the summary: %d messages, the first %+v", len(msgs), msgs[0])
	}
	if msgs[1].Role != model.Assistant || msgs[1].Content[0].ID != "c5" || msgs[2].Content[0].ToolUseID != "c5" || msgs[3].Content[0].ID != "c6" || msgs[4].Content[0].ToolUseID != "c6" {
		t.Errorf("the turns kept do not start at the response of turn 5 with their results: %+v", msgs[1:])
	}
}

// Folding a log again, from its start or from a state folded part way,
// gives the very bytes the model was asked with: a harness rebuilding a
// session after a crash sends what the one before it sent.
func TestCompactionRebuildsTheSameRequest(t *testing.T) {
	pol, _ := policy.Parse([]byte(compactPolicy))
	env := Env{Policy: pol, MaxTurns: 100, Now: t0, RequeueAfter: NoRequeue, Context: testContext}
	l := new(log).request("go").work(4)
	live := l.fold()
	acts := Next(live, env)
	c, ok := acts[len(acts)-1].(Compact)
	if !ok {
		t.Fatalf("Next = %s, want a compaction", showCompact(acts))
	}
	l.compacted(c.ClearThrough, c.SummarizeThrough, "")
	live.Apply(uint64(len(l.events)), l.events[len(l.events)-1])
	want, _ := json.Marshal(Next(live, env))
	got, _ := json.Marshal(Next(l.fold(), env))
	if string(got) != string(want) || !strings.Contains(string(got), "Cleared to keep") {
		t.Errorf("the rebuilt session asks\n  %.300s\nthe live one\n  %.300s", got, want)
	}
}

func TestCapOutput(t *testing.T) {
	call := uuid.MustParse("01a20000-0000-7000-8000-0000000000cc")
	for _, tc := range []struct {
		name, output string
		limit        int
		want         string
	}{
		{"under the cap", "hello", 5, "hello"},
		{"no cap", big, 0, big},
		{"head and tail", "0123456789", 4, "01\n[… 6 bytes cut: the whole output is in the session log, call " + call.String() + "]\n89"},
		{"a rune is not split", "ééééé", 4, "é\n[… 6 bytes cut: the whole output is in the session log, call " + call.String() + "]\né"},
	} {
		if got := capOutput(tc.output, tc.limit, call); got != tc.want {
			t.Errorf("%s: capOutput = %q, want %q", tc.name, got, tc.want)
		}
	}
	l := new(log).request("go")
	l.respond("sandbox", "a:Bash:"+bashTrue).result("a", big)
	st := New("acme", session)
	st.ResultCap = 1000
	for i, ev := range l.events {
		st.Apply(uint64(i+1), ev)
	}
	msgs := st.Conversation()
	got := msgs[len(msgs)-1].Content[0].Content
	if len(got) > 1200 || !strings.Contains(got, "7000 bytes cut") || !strings.HasPrefix(got, big[:500]) || !strings.HasSuffix(got, big[len(big)-500:]) {
		t.Errorf("the model reads %d bytes: %.100q…", len(got), got)
	}
	if st.Results[l.calls["a"].ID].Output != big {
		t.Error("the record of the call was cut")
	}
}

// A summary's usage counts in the session's, and in its cost, as a
// response's does; it is no step.
func TestCompactionUsageCounts(t *testing.T) {
	pol, _ := policy.Parse([]byte(testPolicy))
	st := new(log).request("go").work(2).compacted(1, 0, "").fold()
	u := SessionUsage(st, pol)
	if u.Steps != 2 || u.InputTokens != int64(st.Usage.InputTokens) || st.Usage.OutputTokens != 2*10+100 {
		t.Errorf("usage %+v, session %+v", u, st.Usage)
	}
	if want := pol.Cost("openai:m", st.ByModel["openai:m"]); u.CostUSD != want || st.ByModel["openai:m"].OutputTokens != 120 {
		t.Errorf("cost %v, want %v", u.CostUSD, want)
	}
}

// Deciding a compaction changes nothing of the state: only the fold of the
// compaction recorded does.
func TestDecidingACompactionChangesNothing(t *testing.T) {
	pol, _ := policy.Parse([]byte(compactPolicy))
	env := Env{Policy: pol, MaxTurns: 100, Now: t0, RequeueAfter: NoRequeue, Context: testContext}
	for _, l := range []*log{
		new(log).request("go").work(4),
		new(log).request("go").work(4).add(&event.SessionCompleted{Header: header(event.TypeSessionCompleted)}).request("more"),
	} {
		st := l.fold()
		before, _ := json.Marshal(st.Conversation())
		if acts := Next(st, env); len(acts) == 0 {
			t.Fatal("Next did nothing")
		} else if _, ok := acts[len(acts)-1].(Compact); !ok {
			t.Fatalf("Next = %s, want a compaction", showCompact(acts))
		}
		if after, _ := json.Marshal(st.Conversation()); string(after) != string(before) {
			t.Error("deciding a compaction changed the conversation")
		}
	}
}
