package harness

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/model"
	"corral.dev/pkg/sessionlog"
)

type status int

const (
	statusNew status = iota
	statusRunning
	statusCompleted
	statusFailed
	statusStopped
)

// state is a session as folded from its log.
type state struct {
	tenant  string
	session uuid.UUID
	user    string
	model   string
	status  status
	// requests are the IDs of the requests recorded; lastRequest the latest.
	requests    map[uuid.UUID]bool
	lastRequest uuid.UUID
	// queued are prompts of follow-ups that came while calls were out;
	// they join the conversation after the calls' results.
	queued []model.Block
	// messages is the conversation up to the last recorded response.
	messages []model.Message
	// turn counts the model responses recorded.
	turn int
	// pending is the last response if it came after the last request and
	// made tool calls; nil when the model must be asked next or the
	// session has nothing to do.
	pending *event.ModelResponded
	// dispatched holds the service each call was dispatched to, and
	// dispatchedAt the sequence of the event that recorded it (as far as
	// this state knows: an event folded in while stale counts as at seq).
	dispatched   map[uuid.UUID]string
	dispatchedAt map[uuid.UUID]uint64
	results      map[uuid.UUID]*event.ToolCompleted
	// versions holds, for each memory or skill file this session has read
	// or written, the version it saw last: what its next Write or Edit of
	// the file expects to find there.
	versions map[string]int64
	// asked holds the calls an approval was asked for; decisions the
	// decisions recorded on each, checked when acted on.
	asked     map[uuid.UUID]bool
	decisions map[uuid.UUID][]*event.ApprovalDecided
	usage     model.Usage
	// byModel sums the usage of each model, for the session's cost;
	// sandboxMS sums how long its calls ran in sandboxes; since is when
	// the request it works on came.
	byModel map[string]model.Usage
	// raises are the requests to raise the session's caps.
	raises    []*event.BudgetRaise
	sandboxMS int64
	since     time.Time
	// seq is the stream sequence of the last event folded in; stale is
	// set when an event was folded in that may not follow it in the log.
	seq   uint64
	stale bool
	// trust is what the log says of the session that its next event is
	// judged by: its user, and where each call was dispatched.
	trust *sessionlog.Session
	// answered is set when the last response made no tool calls: the
	// session's answer, to be recorded as completed.
	answered *event.ModelResponded
}

// load folds a session's log into its state. It starts from the state this
// process kept after its last step of the session, if it has it, and reads
// only the events stored since; the log is the truth, whichever harness
// wrote them. The caller must hold the session's lock and its lease;
// owned says the lease stayed this harness's since that step.
//
// When no harness can have written to the session's log since the state
// was kept (it was kept by a step that ended well, and the lease stayed
// here), and the step's trigger is a tool result recorded directly after
// it, load folds the trigger in and reads nothing. Events after the
// trigger, written meanwhile by others (a stop, another call's result),
// are then not folded: the step's first write, conditional on the log
// ending at the trigger, finds them.
func (s *Service) load(ctx context.Context, tenant string, session uuid.UUID, owned bool) (*state, error) {
	st, seq, last := s.folded.get(tenant, session)
	if st == nil {
		st = newState(tenant, session)
	} else if owned && last {
		if e, ok := s.follower(ctx, st, seq); ok {
			st.apply(e.Event)
			st.seq = e.Seq
			return st, nil
		}
	}
	// What is read is judged, and what is rejected is left out (and
	// dead-lettered): a step folds only what the harness and the
	// services each may write.
	entries, err := s.logs.Read(ctx, st.trust, seq)
	if err != nil {
		return nil, fmt.Errorf("load session %s: %w", session, err)
	}
	for _, e := range entries {
		st.seq = e.Seq
		st.apply(e.Event)
	}
	return st, nil
}

// follower returns the tool result that triggered the step ctx was made
// for, judged, if it was recorded directly after the event at seq (its
// After).
func (s *Service) follower(ctx context.Context, st *state, seq uint64) (sessionlog.Entry, bool) {
	m, ok := bus.Delivery(ctx)
	if !ok || m.StreamSeq <= seq || !strings.Contains(m.Subject, "."+event.Kind(event.TypeToolCompleted)+".") {
		return sessionlog.Entry{}, false
	}
	e, err := s.logs.Judge(ctx, m)
	if err != nil {
		return sessionlog.Entry{}, false
	}
	r, ok := e.Event.(*event.ToolCompleted)
	if !ok || r.After != seq || e.Tenant != st.tenant || e.Session != st.session {
		return sessionlog.Entry{}, false
	}
	if s.logs.Admit(ctx, st.trust, e, m.Data) != nil {
		return sessionlog.Entry{}, false
	}
	return e, true
}

// keep keeps st, which a step is done with, for the session's next step,
// unless st no longer stands for the log up to st.seq.
func (s *Service) keep(st *state) {
	if !st.stale {
		s.folded.put(st, st.seq)
	}
}

// append records ev, an event of st's session, and folds it into st. The
// write is conditional on the log ending where st was folded to, so that
// st then stands for the log up to ev without reading it back. Should
// another event have come in between, ev is recorded all the same and st
// is marked stale: the session's next step reads the log again. An event
// recorded already under msgID counts as recorded (and is not folded in).
func (s *Service) append(ctx context.Context, st *state, ev event.Event, msgID string) error {
	if err := s.appendNew(ctx, st, ev, msgID, nil); err != nil && !errors.Is(err, sessionlog.ErrDuplicate) {
		return err
	}
	return nil
}

// appendNew is [Service.append] for an event that must be new: one
// recorded already under msgID returns an error wrapping
// [sessionlog.ErrDuplicate]. unless, if set, changes ev before it is recorded
// without the condition: ev then says less, having not followed what st
// was folded from.
func (s *Service) appendNew(ctx context.Context, st *state, ev event.Event, msgID string, unless func()) error {
	if !st.stale {
		seq, err := s.logs.Append(ctx, ev, msgID, st.seq)
		if err == nil {
			st.seq = seq
			st.fold(ev)
			return nil
		}
		// Whatever happened, st no longer surely stands for the log.
		st.stale = true
		if !errors.Is(err, sessionlog.ErrNotLast) {
			return err
		}
	}
	if unless != nil {
		unless()
	}
	if err := s.logs.Record(ctx, ev, msgID); err != nil {
		return err
	}
	st.fold(ev)
	return nil
}

func newState(tenant string, session uuid.UUID) *state {
	return &state{
		tenant:       tenant,
		session:      session,
		requests:     make(map[uuid.UUID]bool),
		dispatched:   make(map[uuid.UUID]string),
		dispatchedAt: make(map[uuid.UUID]uint64),
		results:      make(map[uuid.UUID]*event.ToolCompleted),
		versions:     make(map[string]int64),
		asked:        make(map[uuid.UUID]bool),
		decisions:    make(map[uuid.UUID][]*event.ApprovalDecided),
		byModel:      make(map[string]model.Usage),
		trust:        sessionlog.NewSession(tenant, session),
	}
}

// fold folds in an event the harness itself wrote for st's session: it
// is what the log now holds, so the session's trust learns from it too.
func (st *state) fold(ev event.Event) {
	_ = st.trust.Admit(sessionlog.Address{Tenant: st.tenant, Session: st.session, Type: ev.Head().Type, Writer: sessionlog.Harness}, ev)
	st.apply(ev)
}

// clone returns a copy of st that shares only immutable parts (events,
// message contents) with it.
func (st *state) clone() *state {
	c := *st
	c.requests = maps.Clone(st.requests)
	c.dispatched = maps.Clone(st.dispatched)
	c.dispatchedAt = maps.Clone(st.dispatchedAt)
	c.results = maps.Clone(st.results)
	c.versions = maps.Clone(st.versions)
	c.asked = maps.Clone(st.asked)
	c.decisions = maps.Clone(st.decisions)
	c.byModel = maps.Clone(st.byModel)
	c.messages = slices.Clone(st.messages)
	c.queued = slices.Clone(st.queued)
	c.trust = st.trust.Clone()
	return &c
}

// foldCache keeps the states this process folded last, so a step reads only
// the events stored since. It is bounded; a state it dropped is folded
// again from the whole log.
type foldCache struct {
	mu sync.Mutex
	m  map[string]foldedState // by bus.SessionKey
}

type foldedState struct {
	st  *state
	seq uint64
	// last is set while this process knows of no event of the session's
	// written after seq by a harness: it was kept by a step that ended
	// well, and no step of the session has failed here since. See
	// [Service.load].
	last bool
}

const foldCacheSize = 4096

func (c *foldCache) get(tenant string, session uuid.UUID) (_ *state, seq uint64, last bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.m[bus.SessionKey(tenant, session)]
	if !ok || f.st.tenant != tenant || f.st.session != session {
		return nil, 0, false
	}
	return f.st.clone(), f.seq, f.last
}

func (c *foldCache) put(st *state, seq uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[string]foldedState)
	}
	key := bus.SessionKey(st.tenant, st.session)
	if _, ok := c.m[key]; !ok && len(c.m) >= foldCacheSize {
		for k := range c.m { // drop one at random
			delete(c.m, k)
			break
		}
	}
	c.m[key] = foldedState{st: st, seq: seq, last: true}
}

// behind notes that events of the session may have been written after
// its cached state by a step here that failed or went stale.
func (c *foldCache) behind(tenant string, session uuid.UUID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := bus.SessionKey(tenant, session)
	if f, ok := c.m[key]; ok {
		f.last = false
		c.m[key] = f
	}
}

// running returns the states cached of running sessions.
func (c *foldCache) running() []*state {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*state
	for _, f := range c.m {
		if f.st.status == statusRunning {
			out = append(out, f.st)
		}
	}
	return out
}

func (st *state) apply(ev any) {
	switch e := ev.(type) {
	case *event.SessionRequested:
		st.requests[e.Request] = true
		st.lastRequest = e.Request
		if st.user == "" { // a session's user is its first request's
			st.user = e.User
		}
		st.model = e.Model
		st.answered = nil
		prompt := model.Block{Type: model.TextBlock, Text: e.Prompt}
		if st.pending != nil && st.status == statusRunning {
			st.queued = append(st.queued, prompt)
			break
		}
		st.status = statusRunning
		st.since = e.Time
		st.flushResults()
		st.messages = append(st.messages, model.Message{Role: model.User, Content: []model.Block{prompt}})
	case *event.ModelResponded:
		st.flushResults()
		st.turn = e.Turn
		st.usage.InputTokens += e.Usage.InputTokens
		st.usage.OutputTokens += e.Usage.OutputTokens
		u := st.byModel[e.Model]
		u.InputTokens += e.Usage.InputTokens
		u.OutputTokens += e.Usage.OutputTokens
		st.byModel[e.Model] = u
		st.messages = append(st.messages, model.Message{Role: model.Assistant, Content: e.Content})
		for _, c := range e.Calls {
			if c.Service != "" {
				st.dispatched[c.ID] = c.Service
				st.dispatchedAt[c.ID] = st.seq
			}
		}
		if len(e.Calls) > 0 {
			st.pending = e
		} else {
			st.answered = e
		}
	case *event.ToolDispatched:
		st.dispatched[e.Call] = e.Service
		st.dispatchedAt[e.Call] = st.seq
	case *event.ToolCompleted:
		st.results[e.Call] = e
		if e.Service == bus.ServiceSandbox {
			st.sandboxMS += e.DurationMS
		}
		if e.Path != "" && !e.IsError {
			st.versions[e.Path] = e.Version
		}
	case *event.ApprovalRequested:
		st.asked[e.Call] = true
	case *event.ApprovalDecided:
		st.decisions[e.Call] = append(slices.Clip(st.decisions[e.Call]), e)
	case *event.BudgetRaise:
		st.raises = append(slices.Clip(st.raises), e)
	case *event.SessionStopped:
		st.status = statusStopped
		st.answered = nil
	case *event.SessionCompleted:
		st.status = statusCompleted
		st.answered = nil
	case *event.SessionFailed:
		// The open turn stays: a follow-up closes it with the results it
		// has, since every tool_use needs its tool_result.
		st.status = statusFailed
		st.answered = nil
	}
}

// missing returns the pending calls that have no result yet.
func (st *state) missing() []event.Call {
	if st.pending == nil {
		return nil
	}
	var out []event.Call
	for _, c := range st.pending.Calls {
		if st.results[c.ID] == nil {
			out = append(out, c)
		}
	}
	return out
}

// flushResults adds the results of the pending calls to the conversation as
// one user message, in the order the model made the calls. A call without a
// result (a session that failed mid-turn and was then continued) gets one
// saying so, since every tool_use needs its tool_result.
func (st *state) flushResults() {
	if st.pending == nil {
		return
	}
	blocks := make([]model.Block, 0, len(st.pending.Calls))
	for _, c := range st.pending.Calls {
		b := model.Block{Type: model.ToolResultBlock, ToolUseID: c.ToolUseID}
		if r := st.results[c.ID]; r != nil {
			b.Content, b.IsError = r.Output, r.IsError
		} else {
			b.Content, b.IsError = "The call was abandoned and did not run.", true
		}
		blocks = append(blocks, b)
	}
	blocks = append(blocks, st.queued...)
	st.messages = append(st.messages, model.Message{Role: model.User, Content: blocks})
	st.pending, st.queued = nil, nil
}

// failureID is the message ID of a failure of the session's current
// request at its current turn: unique per request, so a follow-up's failure
// is not taken for a duplicate of an earlier one.
func (st *state) failureID() string {
	return fmt.Sprintf("%s:turn:%d", st.lastRequest, st.turn+1)
}
