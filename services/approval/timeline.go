package approval

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/aymanbagabas/go-udiff"
	"github.com/google/uuid"

	"corral.dev/pkg/callview"
	"corral.dev/pkg/event"
	"corral.dev/pkg/model"
	"corral.dev/pkg/sessionlog"
	"corral.dev/pkg/tool"
)

// step is one item of a session's timeline on the console: what the
// session page shows of one or more events of its log. Every step has an
// element ID (Anchor), unique in the page, so that a step sent again
// (a call's result, a held call decided, a live stream that reconnects)
// replaces the one shown rather than adding another.
type step struct {
	Kind   string // prompt, turn, call, result, held, compacted, paused, resumed, end
	Anchor string
	Time   time.Time
	// Title is the step's heading, Meta a line under it, Text its body
	// (a prompt, the model's text, a reason, a summary), Thinking the
	// model's thinking.
	Title, Meta, Text, Thinking string
	// Failed marks a failed end or an error result.
	Failed bool
	Call   *callStep
	Result *resultStep
	Held   *heldStep
	// Changes is what the workspace changed, for an end that says so.
	Changes *event.Changes
}

// callStep is a tool call: its input, the diff of an Edit or Write, and
// its result once recorded.
type callStep struct {
	ID     uuid.UUID
	Tool   string
	Args   []arg
	Diff   string
	Result *resultStep
}

// resultStep is a call's result.
type resultStep struct {
	Call    uuid.UUID
	Output  string
	IsError bool
	Meta    string
	// Lines counts the output's lines; a long output is shown folded.
	Lines int
	Long  bool
}

// heldStep is a call (or a raise of the caps, or a request egress held)
// waiting for a reviewer, and what became of it.
type heldStep struct {
	ID      uuid.UUID
	Tenant  string
	Session uuid.UUID
	Tool    string
	Rule    string
	Why     string
	Preview string
	// Pending until decided, or cancelled by the session's end; Outcome
	// then says what became of it.
	Pending bool
	Outcome string
	Denied  bool
}

// Long outputs are folded: past longLines lines or longBytes bytes.
const (
	longLines = 12
	longBytes = 2000
)

// timeline folds a session's accepted events into steps. It is not safe
// for concurrent use.
type timeline struct {
	price func(model string, u model.Usage) float64
	// inputs are the calls' inputs, from the responses that made them;
	// shown the calls whose step is out; held the held calls' steps.
	inputs map[uuid.UUID]json.RawMessage
	shown  map[uuid.UUID]bool
	held   map[uuid.UUID]*step
}

func newTimeline(price func(string, model.Usage) float64) *timeline {
	return &timeline{price: price, inputs: map[uuid.UUID]json.RawMessage{}, shown: map[uuid.UUID]bool{}, held: map[uuid.UUID]*step{}}
}

// steps returns the whole timeline of entries, each call's result inside
// its call.
func (t *timeline) steps(entries []sessionlog.Entry) []*step {
	var out []*step
	at := map[string]int{}
	for _, en := range entries {
		for _, s := range t.add(en) {
			if i, ok := at[s.Anchor]; ok {
				out[i] = s
				continue
			}
			if s.Kind == "result" {
				if i, ok := at["call-"+s.Result.Call.String()]; ok {
					c := *out[i].Call
					c.Result = s.Result
					cs := *out[i]
					cs.Call = &c
					out[i] = &cs
					continue
				}
			}
			at[s.Anchor] = len(out)
			out = append(out, s)
		}
	}
	return out
}

// add returns the steps en adds to the timeline, or changes in it (a step
// with an Anchor already shown replaces it).
func (t *timeline) add(en sessionlog.Entry) []*step {
	h := en.Event.Head()
	base := step{Anchor: "ev-" + h.ID.String(), Time: h.Time}
	switch e := en.Event.(type) {
	case *event.SessionRequested:
		s := base
		s.Kind, s.Title, s.Text = "prompt", "Prompt from "+e.User, e.Prompt
		s.Meta = e.Model
		if e.Environment != "" {
			s.Meta += " · environment " + e.Environment
		}
		return []*step{&s}
	case *event.ModelResponded:
		return t.responded(base, e)
	case *event.ToolCompleted:
		return t.completed(e)
	case *event.ApprovalRequested:
		return t.ask(base, &heldStep{ID: e.Call, Tenant: h.Tenant, Session: h.Session, Tool: e.Tool, Rule: e.Rule, Why: e.Reason, Preview: e.Preview, Pending: true})
	case *event.BudgetRaise:
		return t.ask(base, &heldStep{ID: e.Raise, Tenant: h.Tenant, Session: h.Session, Tool: event.BudgetTool, Rule: "budget-raise", Why: e.Reason + " (new caps: " + string(e.Limits) + ")", Pending: true})
	case *event.ApprovalDecided:
		verdict := "denied"
		if e.Approved {
			verdict = "approved"
		}
		return t.decide(e.Call, verdict+" by "+e.Reviewer+reasonSuffix(e.Reason), !e.Approved)
	case *event.ContextCompacted:
		s := base
		s.Kind, s.Title = "compacted", "Context compacted"
		s.Meta = fmt.Sprintf("before turn %d · about %d tokens, now %d", e.Turn+1, e.TokensBefore, e.TokensAfter)
		s.Text = e.Summary
		return []*step{&s}
	case *event.SessionPaused:
		s := base
		s.Kind, s.Title, s.Text = "paused", "Paused: budget "+e.Budget, e.Reason
		s.Meta = fmt.Sprintf("%d turns · $%.4f · %s", e.Usage.Steps, e.Usage.CostUSD, e.Usage.WallTime)
		if e.Resume != "" {
			s.Text += "\n" + e.Resume
		}
		return []*step{&s}
	case *event.SessionResumed:
		s := base
		s.Kind, s.Title = "resumed", "Resumed"
		s.Meta = "raise approved by " + e.Reviewer
		return []*step{&s}
	case *event.SessionCompleted:
		s := base
		s.Kind, s.Title, s.Text, s.Changes = "end", "Completed", e.Answer, e.Changes
		s.Meta = fmt.Sprintf("%d turns · %d tokens in, %d out", e.Turns, e.Usage.InputTokens, e.Usage.OutputTokens)
		return append(t.cancelHeld(false), &s)
	case *event.SessionFailed:
		s := base
		s.Kind, s.Title, s.Text, s.Failed = "end", "Failed: "+e.Code, e.Reason, true
		return append(t.cancelHeld(false), &s)
	case *event.SessionStopped:
		s := base
		s.Kind, s.Title, s.Text, s.Failed = "end", "Stopped by "+e.By, e.Reason, true
		return append(t.cancelHeld(true), &s)
	}
	return nil
}

func reasonSuffix(reason string) string {
	if reason == "" {
		return ""
	}
	return ": " + reason
}

// responded is a model turn, and a step for each call it makes.
func (t *timeline) responded(base step, e *event.ModelResponded) []*step {
	s := base
	s.Kind = "turn"
	s.Title = fmt.Sprintf("Turn %d", e.Turn)
	s.Text = (model.Response{Content: e.Content}).Text()
	for _, b := range e.Content {
		if b.Type == model.ThinkingBlock && b.Thinking != "" {
			s.Thinking += b.Thinking
		}
	}
	if e.Refusal != "" {
		s.Text += "\n(refused: " + e.Refusal + ")"
	}
	s.Meta = fmt.Sprintf("%s · %d tokens in, %d out", e.Model, e.Usage.InputTokens, e.Usage.OutputTokens)
	if t.price != nil {
		s.Meta += fmt.Sprintf(" · $%.4f", t.price(e.Model, e.Usage))
	}
	out := []*step{&s}
	for _, c := range e.Calls {
		in := e.Input(c)
		t.inputs[c.ID] = in
		t.shown[c.ID] = true
		out = append(out, &step{Kind: "call", Anchor: "call-" + c.ID.String(), Time: base.Time, Call: newCall(c.ID, c.Name, in)})
	}
	return out
}

func newCall(id uuid.UUID, name string, input json.RawMessage) *callStep {
	c := &callStep{ID: id, Tool: name, Diff: callDiff(name, input)}
	for _, x := range callview.Args(input) {
		if name == tool.Write && x.Name == "content" && c.Diff != "" {
			continue // the diff shows it
		}
		n, _ := callview.Visible(x.Name)
		c.Args = append(c.Args, arg{Name: n, Pieces: callview.Split(x.Value)})
	}
	return c
}

// completed is a call's result: on its own, to fill the call's step, or
// with a step of its own for a call no response made (the preparation of
// the workspace).
func (t *timeline) completed(e *event.ToolCompleted) []*step {
	r := &resultStep{Call: e.Call, Output: e.Output, IsError: e.IsError}
	r.Lines = strings.Count(e.Output, "\n") + 1
	r.Long = r.Lines > longLines || len(e.Output) > longBytes
	var meta []string
	if e.ExitCode != nil {
		meta = append(meta, fmt.Sprintf("exit %d", *e.ExitCode))
	}
	if e.DurationMS > 0 {
		meta = append(meta, (time.Duration(e.DurationMS) * time.Millisecond).String())
	}
	if e.TimedOut {
		meta = append(meta, "timed out")
	}
	if e.Truncated {
		meta = append(meta, "output cut")
	}
	if e.Prepared != nil {
		meta = append(meta, fmt.Sprintf("%d files laid out", e.Prepared.Files))
	}
	r.Meta = strings.Join(meta, " · ")
	if t.shown[e.Call] {
		return []*step{{Kind: "result", Anchor: "result-" + e.Call.String(), Time: e.Time, Result: r}}
	}
	t.shown[e.Call] = true
	c := newCall(e.Call, e.Name, t.inputs[e.Call])
	c.Result = r
	return []*step{{Kind: "call", Anchor: "call-" + e.Call.String(), Time: e.Time, Call: c}}
}

func (t *timeline) ask(base step, h *heldStep) []*step {
	s := base
	s.Kind, s.Anchor, s.Held = "held", "held-"+h.ID.String(), h
	s.Title = "Held for a reviewer: " + h.Tool
	t.held[h.ID] = &s
	return []*step{&s}
}

// decide returns the held step of call as decided (or cancelled).
func (t *timeline) decide(call uuid.UUID, outcome string, denied bool) []*step {
	s, ok := t.held[call]
	if !ok || !s.Held.Pending {
		return nil
	}
	h := *s.Held
	h.Pending, h.Outcome, h.Denied = false, outcome, denied
	c := *s
	c.Held = &h
	t.held[call] = &c
	return []*step{&c}
}

// cancelHeld returns the held steps a session's end cancels, as the
// approval service cancels them: every held call when it is stopped; on
// any other end, those but raises of the caps and requests egress held,
// which outlive the turn.
func (t *timeline) cancelHeld(stopped bool) []*step {
	var out []*step
	for id, s := range t.held {
		if !s.Held.Pending || s.Held.Tool == event.BudgetTool || s.Held.Tool == event.EgressTool && !stopped {
			continue
		}
		out = append(out, t.decide(id, "cancelled: the session ended", true)...)
	}
	return out
}

// callDiff is what an Edit or a Write changes, as a unified diff: an
// Edit's old_string to its new_string (without the file around it), a
// Write's content as a new file; "" for any other call.
func callDiff(name string, input json.RawMessage) string {
	if name != tool.Edit && name != tool.Write {
		return ""
	}
	x, err := tool.Parse(name, input)
	if err != nil {
		return ""
	}
	switch a := x.(type) {
	case *tool.EditArgs:
		// Strings cut from a file: whether they end in a newline says
		// nothing of the file's end.
		d := udiff.Unified("a"+a.FilePath, "b"+a.FilePath, a.OldString, a.NewString)
		return strings.ReplaceAll(d, "\\ No newline at end of file\n", "")
	case *tool.WriteArgs:
		return udiff.Unified("/dev/null", "b"+a.FilePath, "", a.Content)
	}
	return ""
}

// diffLine is a line of a unified diff, with its class on the page.
type diffLine struct{ Class, Text string }

// difflines splits a unified diff into its lines, each marked added,
// deleted, a hunk's header or context.
func difflines(diff string) []diffLine {
	var out []diffLine
	for line := range strings.Lines(diff) {
		class := ""
		switch {
		case strings.HasPrefix(line, "+++"), strings.HasPrefix(line, "---"):
			class = "file"
		case strings.HasPrefix(line, "+"):
			class = "add"
		case strings.HasPrefix(line, "-"):
			class = "del"
		case strings.HasPrefix(line, "@@"):
			class = "hunk"
		}
		out = append(out, diffLine{Class: class, Text: strings.TrimSuffix(line, "\n")})
	}
	return out
}
