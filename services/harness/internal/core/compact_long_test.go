package core

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/uuid"

	"corral.dev/pkg/event"
	"corral.dev/pkg/model"
	"corral.dev/pkg/policy"
)

// A session of 500 turns, each reading a large output (up to the cap,
// with lines, quotes and non-ASCII text that JSON makes longer), never
// asks the model with more than its window holds, counted as a provider
// would, from the JSON of the whole request; nor does any summary's
// request. The estimates start from an overhead lower than the real one:
// what the responses report corrects them.
func TestFiveHundredTurnsStayInTheWindow(t *testing.T) {
	const (
		window = 20000
		turns  = 500
		// overhead is the true tokens of the system prompt and the tools.
		overhead = 1500
	)
	pol, err := policy.Parse([]byte(compactPolicy))
	if err != nil {
		t.Fatal(err)
	}
	env := Env{Policy: pol, MaxTurns: turns, Now: t0, RequeueAfter: NoRequeue,
		Context: Context{Window: window, Output: 1024, Threshold: 0.75, Target: 0.5, KeepResults: 3, Overhead: 300, SummaryTokens: 1000}}
	tokens := func(msgs []model.Message) int {
		b, err := json.Marshal(msgs)
		if err != nil {
			t.Fatal(err)
		}
		return overhead + len(b)/4
	}
	rng := rand.New(rand.NewPCG(1, 2))
	output := func(turn int) string {
		var b strings.Builder
		for b.Len() < 1000+rng.IntN(40000) {
			fmt.Fprintf(&b, "turn %d line %d: \"quoted\" \\ é ü 日本 %x\n", turn, b.Len(), rng.Uint64())
		}
		return b.String()
	}
	st := New("acme", session)
	st.ResultCap = 12 << 10
	var seq uint64
	apply := func(ev any) { seq++; st.Apply(seq, ev) }
	apply(&event.SessionRequested{Header: header(event.TypeSessionRequested), Request: uuid.New(), User: "ada", Model: "openai:m", Prompt: "work through the backlog"})

	var total, compactions, summaries, peak int
	for st.Status == StatusRunning {
		acts := Next(st, env)
		if len(acts) == 0 {
			t.Fatalf("turn %d: Next has nothing to do", st.Turn)
		}
		switch a := acts[len(acts)-1].(type) {
		case AskModel:
			in := tokens(a.Messages)
			peak = max(peak, in)
			if in+env.Context.Output > window {
				t.Fatalf("turn %d: the request takes %d tokens and %d for output: over the window of %d", st.Turn+1, in, env.Context.Output, window)
			}
			turn := st.Turn + 1
			ev := &event.ModelResponded{Header: header(event.TypeModelResponded), Turn: turn, Model: "openai:m", Usage: model.Usage{InputTokens: in, OutputTokens: 60}}
			ev.Content = []model.Block{{Type: model.TextBlock, Text: fmt.Sprintf("turn %d: next, the step after", turn)}}
			if turn < turns {
				id := fmt.Sprintf("call_%d", turn)
				ev.Content = append(ev.Content, model.Block{Type: model.ToolUseBlock, ID: id, Name: "Bash", Input: json.RawMessage(`{"command":"make step"}`)})
				ev.Calls = []event.Call{{ID: uuid.New(), ToolUseID: id, Name: "Bash"}}
			}
			apply(ev)
		case Dispatch:
			out := output(st.Turn)
			total += len(out)
			apply(&event.ToolDispatched{Header: header(event.TypeToolDispatched), Call: a.Call.ID, Turn: st.Turn, Name: a.Call.Name, Service: a.Service})
			apply(&event.ToolCompleted{Header: header(event.TypeToolCompleted), Call: a.Call.ID, Name: a.Call.Name, Output: out, Service: a.Service})
		case Compact:
			compactions++
			e := &event.ContextCompacted{Header: header(event.TypeContextCompacted), Turn: st.Turn, ClearedThrough: a.ClearThrough,
				SummarizedThrough: a.SummarizeThrough, TokensBefore: a.Tokens, TokensAfter: a.After}
			if a.SummarizeThrough > 0 {
				summaries++
				if in := tokens(a.Older) + 100; in+env.Context.SummaryTokens > window {
					t.Fatalf("turn %d: the summary's request takes %d tokens: over the window of %d", st.Turn, in, window)
				}
				e.Summary = strings.Repeat(fmt.Sprintf("Through turn %d the backlog went step by step. ", a.SummarizeThrough), 60)
				e.Model, e.Usage = "openai:m", model.Usage{InputTokens: tokens(a.Older), OutputTokens: 700}
			}
			apply(e)
		case Complete:
			apply(&event.SessionCompleted{Header: header(event.TypeSessionCompleted), Answer: a.Answer, Turns: st.Turn})
		default:
			t.Fatalf("turn %d: Next = %s", st.Turn, showCompact(acts))
		}
	}
	if st.Status != StatusCompleted || st.Turn != turns {
		t.Fatalf("the session ended %v at turn %d, want completed at %d", st.Status, st.Turn, turns)
	}
	if total/4 < 3*window || summaries == 0 || compactions <= summaries {
		t.Errorf("outputs of %d tokens, %d compactions of which %d summaries: the test does not test what it says", total/4, compactions, summaries)
	}
	// Clearing comes in batches: a compaction every few turns, not every turn.
	if compactions > turns/3 {
		t.Errorf("%d compactions in %d turns", compactions, turns)
	}
	t.Logf("outputs of %d tokens; %d compactions, %d summaries; the largest request %d tokens", total/4, compactions, summaries, peak)
}
