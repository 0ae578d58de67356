package core

import (
	"github.com/google/uuid"

	"corral.dev/pkg/event"
	"corral.dev/pkg/model"
)

// Context is what a step knows of the context window of the session's
// model, by which the conversation is compacted before a request would
// not fit ([Compact]).
type Context struct {
	// Window is the model's context window, in tokens; zero compacts
	// nothing.
	Window int
	// Output is what each request keeps of the window for the model's
	// output: its max_tokens.
	Output int
	// Threshold is the share of the window, Output left out, past which
	// the next request's estimated input has the conversation compacted
	// (0.75); Target the share a compaction brings it under (0.5), so
	// that compactions come in batches, many turns apart.
	Threshold, Target float64
	// KeepResults is how many of the most recent tool results clearing
	// leaves as they are (at least the last turn's, whatever it says).
	KeepResults int
	// Overhead is what a request holds besides its messages (the tools,
	// the system prompt), in tokens, estimated: counted only until a
	// response reports what its request really took.
	Overhead int
	// SummaryTokens is the most a summary may take, kept for it when
	// deciding how much to summarise.
	SummaryTokens int
}

// Compact makes the conversation smaller before the model is asked for
// the next turn: the results of the calls of turns up to ClearThrough
// cleared (the model reads a note saying where each whole output is),
// and, when SummarizeThrough is set, the conversation up to that turn,
// Older (as the model reads it once cleared), replaced by a summary the
// model is asked to write of it. The harness records it as one
// [event.ContextCompacted], which the fold applies.
//
// The cut for a summary is always before a response of the model: a
// tool_use and its tool_result are never parted.
type Compact struct {
	ClearThrough     int
	SummarizeThrough int
	Older            []model.Message
	// Tokens is the estimate of the next request's input tokens, and After
	// of it once compacted (a summary left out).
	Tokens, After int
}

func (Compact) action() {}

// bytesPerToken is how many bytes of a message the estimates count as a
// token: what the providers' tokenizers make of English and code, about.
// The estimates count from what the last response reported, so that this
// only has to hold for what came since.
const bytesPerToken = 4

// contextState is what the fold keeps to compact the conversation: where
// each message came from, what the last response said its request took,
// and what the compactions did.
type contextState struct {
	// origins holds, for each message of State.Messages, where it came
	// from.
	origins []origin
	// base is the tokens of the conversation up to the last response, as
	// the response reported them (input and output), and baseSize the
	// size of the conversation it stands for; zero when not known.
	base, baseSize int
	// cleared is the last turn whose results are cleared.
	cleared int
	// compactions counts the compactions folded in; last is when the last
	// was made. No compaction follows another until the conversation grew
	// (a response or a request came): one that did not bring the estimate
	// under the threshold would be made again and again.
	compactions int
	last        mark
}

// mark is where a session is in its conversation: its responses and its
// last request.
type mark struct {
	turn    int
	request uuid.UUID
}

// origin is where a message came from: the turn of the response it is, or
// whose results it holds (zero for a prompt or a summary), and for
// results, the call of each tool_result block, in order.
type origin struct {
	turn  int
	calls []event.Call
}

// push appends m, of turn (zero for a prompt), holding the results of
// calls, to the conversation.
func (st *State) push(m model.Message, turn int, calls []event.Call) {
	st.Messages = append(st.Messages, m)
	st.ctx.origins = append(st.ctx.origins, origin{turn, calls})
}

// originOf returns where message i came from (nothing known for a message
// not pushed).
func (st *State) originOf(i int) origin {
	if i < len(st.ctx.origins) {
		return st.ctx.origins[i]
	}
	return origin{}
}

// responded notes what the response just pushed said its request took:
// the estimates of the requests after it count from there.
func (st *State) responded(u model.Usage) {
	st.ctx.base, st.ctx.baseSize = 0, 0
	if u.InputTokens > 0 && u.OutputTokens >= 0 {
		st.ctx.base, st.ctx.baseSize = u.InputTokens+u.OutputTokens, size(st.Messages)
	}
}

// estimate returns the input tokens of a request holding msgs, estimated:
// what the last response reported, changed by what was added or taken
// away since, at [bytesPerToken]; or, before any response reported, all
// of it counted, with overhead for the rest of the request.
func (st *State) estimate(msgs []model.Message, overhead int) int {
	n := size(msgs)
	if st.ctx.base > 0 {
		return max(0, st.ctx.base+(n-st.ctx.baseSize)/bytesPerToken)
	}
	return overhead + n/bytesPerToken
}

// size counts the bytes of msgs as the estimates do: the text of every
// block, with a little for the JSON around it.
func size(msgs []model.Message) int {
	const messageOverhead, blockOverhead = 16, 24
	n := 0
	for _, m := range msgs {
		n += messageOverhead
		for _, b := range m.Content {
			n += blockOverhead + len(b.Text) + len(b.ID) + len(b.Name) + len(b.Input) + len(b.ToolUseID) +
				len(b.Content) + len(b.Thinking) + len(b.Signature) + len(b.Data)
		}
	}
	return n
}

// compaction returns how to compact msgs, the conversation the model is
// asked with next (from origins: see [State.view]), or nil when the next
// request fits under the threshold, when a compaction was made already
// since the conversation last grew, or when there is nothing left to
// compact.
//
// Results are cleared in batches, down to the most recent, and not a few
// each turn: every compaction changes the conversation from its first
// changed message on, which the provider's prompt cache must then write
// again; between compactions the prompt only grows, and each turn reads
// back what the turn before cached.
func compaction(st *State, env Env, msgs []model.Message, origins []origin) *Compact {
	c := env.Context
	if c.Window <= 0 || st.ctx.compactions > 0 && st.ctx.last == (mark{st.Turn, st.LastRequest}) {
		return nil
	}
	room := c.Window - c.Output
	tokens := st.estimate(msgs, c.Overhead)
	if float64(tokens) <= float64(room)*c.Threshold {
		return nil
	}
	target := int(float64(room) * c.Target)
	through := max(st.ctx.cleared, clearable(msgs, origins, c.KeepResults))
	cleared, changed := clearResults(msgs, origins, st.ctx.cleared, through, st.Results)
	if !changed {
		through = st.ctx.cleared // all short already: nothing to record
	}
	act := &Compact{ClearThrough: through, Tokens: tokens, After: st.estimate(cleared, c.Overhead)}
	if act.After > target {
		if cut := summaryCut(cleared, origins, target-c.Overhead-c.SummaryTokens); cut > 0 {
			act.SummarizeThrough = origins[cut].turn - 1
			act.Older = cleared[:cut]
			act.After = c.Overhead + size(cleared[cut:])/bytesPerToken
		}
	}
	if act.ClearThrough == st.ctx.cleared && act.SummarizeThrough == 0 {
		return nil // nothing left to compact: the model is asked as it is
	}
	return act
}

// clearable returns the last turn whose results may be cleared so that the
// keep most recent results, and at least the last turn's, stay as they
// are.
func clearable(msgs []model.Message, origins []origin, keep int) int {
	kept, last := 0, true
	for i := len(msgs) - 1; i >= 0; i-- {
		if origins[i].turn == 0 || msgs[i].Role != model.User {
			continue
		}
		if kept >= keep && !last {
			return origins[i].turn
		}
		kept += len(origins[i].calls)
		last = false
	}
	return 0
}

// summaryCut returns where to cut msgs for a summary: before the earliest
// response of the model whose conversation from there on takes at most
// budget tokens, counted; or before the last response if none does. It
// returns 0 when that would summarise no response of the model.
func summaryCut(msgs []model.Message, origins []origin, budget int) int {
	cut, tail := 0, 0
	for i := len(msgs) - 1; i > 0; i-- {
		tail += size(msgs[i : i+1])
		if msgs[i].Role != model.Assistant || origins[i].turn == 0 {
			continue
		}
		if cut != 0 && tail/bytesPerToken > budget {
			break
		}
		cut = i
	}
	for i := range cut {
		if msgs[i].Role == model.Assistant {
			return cut
		}
	}
	return 0
}
