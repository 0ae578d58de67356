// Package core is a harness session as plain Go: its [State], folded from
// the session's events by [State.Apply], and what a step of it does next,
// [Next]. Nothing here reads or writes the bus, asks a model or reads a
// clock: the harness folds the session's log into a State, calls Next
// with what it knows of the world ([Env]), and carries out the [Action]s,
// recording what they do as events that it folds in again.
package core

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/event"
	"corral.dev/pkg/model"
	"corral.dev/pkg/policy"
)

// Status is where a session is.
type Status int

const (
	StatusNew Status = iota
	StatusRunning
	StatusCompleted
	StatusFailed
	StatusStopped
	// StatusPaused is a session over a budget, waiting for a raise (see
	// [State.Paused]).
	StatusPaused
)

// State is a session as folded from its log.
type State struct {
	Tenant  string
	Session uuid.UUID
	User    string
	Model   string
	Status  Status
	// Requests are the IDs of the requests recorded; LastRequest the
	// latest.
	Requests    map[uuid.UUID]bool
	LastRequest uuid.UUID
	// Queued are prompts of follow-ups that came while calls were out;
	// they join the conversation after the calls' results.
	Queued []model.Block
	// Messages is the conversation up to the last recorded response.
	Messages []model.Message
	// Turn counts the model responses recorded.
	Turn int
	// Pending is the last response if it came after the last request and
	// made tool calls; nil when the model must be asked next or the
	// session has nothing to do.
	Pending *event.ModelResponded
	// Answered is set when the last response made no tool calls: the
	// session's answer, to be recorded as completed.
	Answered *event.ModelResponded
	// Dispatched holds, for each call dispatched, the service it was
	// dispatched to and where the log recorded so.
	Dispatched map[uuid.UUID]Where
	Results    map[uuid.UUID]*event.ToolCompleted
	// Versions holds, for each memory or skill file this session has read
	// or written, the version it saw last: what its next Write or Edit of
	// the file expects to find there.
	Versions map[string]int64
	// Asked are the calls a reviewer was asked about, with the decisions
	// recorded on each, checked when acted on.
	Asked     map[uuid.UUID]bool
	Decisions map[uuid.UUID][]*event.ApprovalDecided
	// Usage sums the session's tokens, ByModel its usage of each model
	// (for its cost), SandboxMS how long its calls ran in sandboxes, and
	// Since is when the request it works on came.
	Usage     model.Usage
	ByModel   map[string]model.Usage
	SandboxMS int64
	Since     time.Time
	// Prepare is the first request's call that prepares the workspace,
	// with what it starts from, when there is anything to prepare;
	// Prepared its result once recorded.
	Prepare      uuid.UUID
	PrepareInput event.PrepareInput
	Prepared     *event.ToolCompleted
	// Changes is what the workspace, started from a repository, changed
	// since, as of the last snapshot.
	Changes *event.Changes
	// Raises are the requests to raise the session's caps.
	Raises []*event.BudgetRaise
	// Paused is the pause of a session over a budget, while it lasts;
	// Pauses counts the pauses recorded, and Unpause holds the decisions
	// on raises recorded since the pause, one of which may resume it.
	Paused  *event.SessionPaused
	Pauses  int
	Unpause []*event.ApprovalDecided
	// Config is what the session runs with beyond its tenant's policy, as
	// its first request set it: its own instructions, the tools it is
	// offered and those each call of which a reviewer approves; Budget
	// its own caps, read from Config.Budget (see [SessionLimits]), and
	// BadBudget why they do not read, which fails the session.
	Config    event.SessionConfig
	Budget    policy.Limits
	BadBudget error
	// Seq is the stream sequence of the last event applied.
	Seq uint64
	// ResultCap is the most bytes of a call's output the model reads
	// (see capOutput); zero reads all of it. It is the harness's setting,
	// not the log's, and must be set before the first event is applied.
	ResultCap int
	// ctx is what compacting the conversation needs (see context.go).
	ctx contextState
}

// Where is where a call was dispatched: its service, and the sequence of
// the event that recorded it.
type Where struct {
	Service string
	Seq     uint64
}

// New returns the state of a session with no events.
func New(tenant string, session uuid.UUID) *State {
	return &State{
		Tenant:     tenant,
		Session:    session,
		Requests:   make(map[uuid.UUID]bool),
		Dispatched: make(map[uuid.UUID]Where),
		Results:    make(map[uuid.UUID]*event.ToolCompleted),
		Versions:   make(map[string]int64),
		Asked:      make(map[uuid.UUID]bool),
		Decisions:  make(map[uuid.UUID][]*event.ApprovalDecided),
		ByModel:    make(map[string]model.Usage),
	}
}

// Apply folds in ev, an event of the session stored at seq (the last
// sequence known, st.Seq, for an event recorded where its sequence is not
// known).
func (st *State) Apply(seq uint64, ev any) {
	st.Seq = seq
	switch e := ev.(type) {
	case *event.SessionRequested:
		if len(st.Requests) == 0 && e.Prepare != uuid.Nil {
			st.Prepare = e.Prepare
			st.PrepareInput = event.PrepareInput{Repo: e.Repo, Files: e.Files, Environment: e.Environment, EnvironmentVersion: e.EnvironmentVersion, Vaults: e.Vaults}
		}
		if len(st.Requests) == 0 {
			st.configure(e.SessionConfig)
		}
		st.Requests[e.Request] = true
		st.LastRequest = e.Request
		if st.User == "" { // a session's user is its first request's
			st.User = e.User
		}
		st.Model = e.Model
		st.Answered = nil
		prompt := model.Block{Type: model.TextBlock, Text: e.Prompt}
		st.followUpPaused(e)
		if st.Pending != nil && st.Status == StatusRunning {
			st.Queued = append(st.Queued, prompt)
			break
		}
		st.Status = StatusRunning
		st.Since = e.Time
		st.flushResults()
		st.push(model.Message{Role: model.User, Content: []model.Block{prompt}}, 0, nil)
	case *event.ModelResponded:
		st.flushResults()
		st.Turn = e.Turn
		st.Usage.Add(e.Usage)
		u := st.ByModel[e.Model]
		u.Add(e.Usage)
		st.ByModel[e.Model] = u
		st.push(model.Message{Role: model.Assistant, Content: e.Content}, e.Turn, nil)
		st.responded(e.Usage)
		// A response of an earlier version may record the dispatch of
		// its calls itself: the same record as a tool.dispatched event's.
		for _, d := range e.Dispatches() {
			st.Dispatched[d.Call] = Where{d.Service, seq}
		}
		if len(e.Calls) > 0 {
			st.Pending = e
		} else {
			st.Answered = e
		}
	case *event.ToolDispatched:
		st.Dispatched[e.Call] = Where{e.Service, seq}
	case *event.ToolCompleted:
		if e.Changes != nil && e.Service == serviceSandbox {
			st.Changes = e.Changes
		}
		if e.Call == st.Prepare && st.Prepare != uuid.Nil {
			st.prepared(e)
			break
		}
		st.Results[e.Call] = e
		if e.Service == serviceSandbox {
			st.SandboxMS += e.DurationMS
		}
		if e.Path != "" && !e.IsError {
			st.Versions[e.Path] = e.Version
		}
	case *event.ApprovalRequested:
		st.Asked[e.Call] = true
	case *event.ApprovalDecided:
		st.Decisions[e.Call] = append(st.Decisions[e.Call], e)
		st.raiseDecided(e)
	case *event.BudgetRaise:
		st.Raises = append(st.Raises, e)
	case *event.SessionPaused:
		st.pause(e)
	case *event.SessionResumed:
		st.resume(e)
	case *event.ContextCompacted:
		st.compacted(e)
	case *event.SessionStopped:
		st.Status = StatusStopped
		st.Answered = nil
	case *event.SessionCompleted:
		st.Status = StatusCompleted
		st.Answered = nil
	case *event.SessionFailed:
		// The open turn stays: a follow-up closes it with the results it
		// has, since every tool_use needs its tool_result.
		st.Status = StatusFailed
		st.Answered = nil
	}
}

// prepared folds in the result of the call that prepared the workspace:
// what it says of the workspace leads the session's first message, so
// that the model knows what /workspace holds before its first turn.
func (st *State) prepared(e *event.ToolCompleted) {
	if st.Prepared != nil {
		return
	}
	st.Prepared = e
	st.SandboxMS += e.DurationMS
	if e.IsError || e.Output == "" || len(st.Messages) == 0 {
		return
	}
	first := st.Messages[0]
	first.Content = append([]model.Block{{Type: model.TextBlock, Text: e.Output}}, first.Content...)
	st.Messages = append([]model.Message{first}, st.Messages[1:]...)
}

// Missing returns the pending calls that have no result yet.
func (st *State) Missing() []event.Call {
	if st.Pending == nil {
		return nil
	}
	var out []event.Call
	for _, c := range st.Pending.Calls {
		if st.Results[c.ID] == nil {
			out = append(out, c)
		}
	}
	return out
}

// Conversation returns the messages the model is asked with next: the
// conversation, and the results of the pending calls, if any, with the
// follow-ups that came meanwhile.
func (st *State) Conversation() []model.Message {
	msgs, _ := st.view()
	return msgs
}

// flushResults adds the results of the pending calls to the conversation as
// one user message, in the order the model made the calls. A call without a
// result (a session that failed mid-turn and was then continued) gets one
// saying so, since every tool_use needs its tool_result.
func (st *State) flushResults() {
	if st.Pending == nil {
		return
	}
	m, o := st.results()
	st.push(m, o.turn, o.calls)
	st.Pending, st.Queued = nil, nil
}

// results returns the message flushResults adds, and where it comes from.
func (st *State) results() (model.Message, origin) {
	blocks := make([]model.Block, 0, len(st.Pending.Calls)+len(st.Queued))
	for _, c := range st.Pending.Calls {
		b := model.Block{Type: model.ToolResultBlock, ToolUseID: c.ToolUseID}
		if r := st.Results[c.ID]; r != nil {
			b.Content, b.IsError = capOutput(r.Output, st.ResultCap, c.ID), r.IsError
		} else {
			b.Content, b.IsError = "The call was abandoned and did not run.", true
		}
		blocks = append(blocks, b)
	}
	blocks = append(blocks, st.Queued...)
	return model.Message{Role: model.User, Content: blocks}, origin{st.Pending.Turn, st.Pending.Calls}
}

// input returns the input the pending response gave call c.
func (st *State) input(c event.Call) json.RawMessage {
	return st.Pending.Input(c)
}
