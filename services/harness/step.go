package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/metrics"
	"corral.dev/pkg/model"
	"corral.dev/pkg/policy"
	"corral.dev/pkg/tool"
)

// handleStep moves a session on after a new request or tool result: it takes
// the session's lease, folds the log into state, and does whatever comes
// next. Every step is idempotent: a redelivered trigger finds its work done.
func (s *Service) handleStep(ctx context.Context, m bus.Msg) error {
	tenant, session, err := bus.ParseSubject(m.Subject)
	if err != nil {
		return bus.Permanent(err)
	}
	return s.withSession(ctx, s.sessions.Lock, tenant, session, s.step)
}

// withSession runs fn on the session's state, folded from its log, under
// the session's lock in this process (taken with lock) and its lease.
func (s *Service) withSession(ctx context.Context, lock func(context.Context, string) (func(), error), tenant string, session uuid.UUID, fn func(context.Context, *state) error) error {
	unlock, err := lock(ctx, bus.SessionKey(tenant, session))
	if err != nil {
		return err
	}
	defer unlock()
	ctx, release, owned, err := s.acquireLease(ctx, tenant, session)
	if err != nil {
		return err
	}
	st, err := s.load(ctx, tenant, session, owned)
	if err == nil {
		err = fn(ctx, st)
	}
	if err != nil || st.stale {
		// It may have written events after the state kept.
		s.folded.behind(tenant, session)
	}
	if err != nil {
		release(false)
		return err
	}
	s.keep(st)
	// A running session's next step most often comes here soon.
	release(st.status == statusRunning && !s.stopping.Load())
	return nil
}

func (s *Service) step(ctx context.Context, st *state) error {
	if st.status != statusRunning {
		return nil
	}
	if st.answered == nil {
		// Running calls spends; completing does not. Steps count model
		// turns: they are checked before asking, below.
		if stopped, err := s.budgetCheck(ctx, st, false); err != nil || stopped {
			return err
		}
	}
	switch {
	case st.pending != nil:
		if missing := st.missing(); len(missing) > 0 {
			// Calls dispatched before are queued again only when this
			// step may follow a crash between their dispatch and
			// queueing: see requeueAfter.
			return s.dispatch(ctx, st, missing, requeueAfter(ctx))
		}
		if err := s.backfillDispatched(ctx, st); err != nil {
			return err
		}
		st.flushResults()
	case st.answered != nil:
		return s.complete(ctx, st)
	}
	if st.turn >= s.cfg.MaxTurns {
		reason := fmt.Sprintf("the session reached its limit of %d model turns", s.cfg.MaxTurns)
		return s.fail(ctx, st, "turn_limit", reason)
	}
	if stopped, err := s.budgetCheck(ctx, st, true); err != nil || stopped {
		return err
	}
	if ev, err := s.ask(ctx, st); err != nil || ev == nil {
		return err
	}
	// The model may have taken a while: a stop or a failure (wall time)
	// recorded meanwhile ends the session here. The response was recorded
	// on the condition that nothing came after what st was folded from;
	// only if something did is the log looked at.
	if st.stale {
		if ended, err := s.endedSince(ctx, st); err != nil || ended {
			return err
		}
	}
	if st.pending != nil {
		return s.dispatch(ctx, st, st.pending.Calls, 0)
	}
	return s.complete(ctx, st)
}

// endedSince reports whether the session was stopped or failed after the
// events st was folded from (a stop counts only from the session's user).
func (s *Service) endedSince(ctx context.Context, st *state) (bool, error) {
	entries, err := s.logs.Read(ctx, st.trust.Clone(), st.seq)
	if err != nil {
		return false, fmt.Errorf("look for a stop: %w", err)
	}
	for _, e := range entries {
		if e.Type == event.TypeSessionStopped || e.Type == event.TypeSessionFailed {
			return true, nil
		}
	}
	return false, nil
}

// ask calls the model for the session's next turn and records its response.
// It returns nil, nil when the failure was recorded as the session's.
func (s *Service) ask(ctx context.Context, st *state) (*event.ModelResponded, error) {
	client, name, err := s.providers.Resolve(st.model)
	if err != nil {
		return nil, s.fail(ctx, st, event.CodeUnknownModel, err.Error())
	}
	skills, err := s.skills.load(ctx, st.tenant)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	resp, err := client.Complete(ctx, model.Request{
		Model:     name,
		System:    systemPrompt(st, skills),
		Messages:  st.messages,
		Tools:     tool.Specs(),
		MaxTokens: s.cfg.MaxTokens,
	})
	provider, _, _ := strings.Cut(st.model, ":")
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	s.metrics.model.WithLabelValues(metrics.OneOf(provider, "openai", "anthropic"), outcome).Observe(time.Since(start).Seconds())
	if errors.Is(err, model.ErrPermanent) {
		return nil, s.fail(ctx, st, event.CodeModelError, err.Error())
	}
	if err != nil {
		return nil, fmt.Errorf("ask %s for turn %d: %w", st.model, st.turn+1, err)
	}
	ev := &event.ModelResponded{
		Header:     event.NewHeader(event.TypeModelResponded, st.tenant, st.session),
		Turn:       st.turn + 1,
		Model:      st.model,
		Content:    resp.Content,
		StopReason: resp.StopReason,
		Usage:      resp.Usage,
		User:       st.user,
	}
	for i := range ev.Content {
		b := &ev.Content[i]
		if b.Type != model.ToolUseBlock {
			continue
		}
		if b.ID == "" { // some local servers give no call IDs
			b.ID = fmt.Sprintf("call_%d_%d", ev.Turn, i)
		}
		ev.Calls = append(ev.Calls, event.Call{ID: uuid.Must(uuid.NewV7()), ToolUseID: b.ID, Name: b.Name})
	}
	s.log.DebugContext(ctx, "model responded", "session", st.session, "turn", ev.Turn, "calls", len(ev.Calls))
	// The calls the policy allows are dispatched with the response, which
	// records so: on the condition that nothing came in between, which a
	// stop would have. Should something have, the response is recorded
	// without them, and they are dispatched once the step has looked.
	for i, c := range ev.Calls {
		input := ev.Input(c)
		if service, _, err := checkCall(c.Name, input); err == nil && s.decide(st, c, input).verdict == policy.Allow {
			ev.Calls[i].Service = service
		}
	}
	undispatch := func() {
		for i := range ev.Calls {
			ev.Calls[i].Service = ""
		}
	}
	// Recorded before anything acts on it: a harness that dies after this
	// reuses the response instead of asking again. A duplicate means
	// another response was recorded for this turn first; acting on this one
	// would run calls the log does not hold, so the step starts over.
	if err := s.appendNew(ctx, st, ev, fmt.Sprintf("%s:turn:%d", st.session, ev.Turn), undispatch); err != nil {
		return nil, err
	}
	s.spent(st, ev)
	return ev, nil
}

// dispatch puts each call not yet dispatched on the work queue, or records
// an error result for a call that cannot run as written, or asks a
// reviewer for one the policy holds. A call is recorded as dispatched
// (with its response, or by a tool.dispatched event) before it goes on the
// queue, so that its result follows every event this step records: the
// call names the last of them (After), and its result is recorded right
// after it when nothing else came in between, which the next step folds
// in without reading the log.
//
// Calls recorded as dispatched already are put on the queue too when they
// were recorded so after the event at seq requeueAfter: they were
// dispatched by this step, or by an earlier run of this step's trigger
// that may have died before it queued them. The duplicate window drops
// the copy of a call that made it.
func (s *Service) dispatch(ctx context.Context, st *state, calls []event.Call, requeueAfter uint64) error {
	var queue []toQueue
	for _, c := range calls {
		input := st.pending.Input(c)
		if st.dispatched[c.ID] != "" {
			// Queued again only as it would be queued now: the policy
			// and any reviewer's decision are applied afresh, and only
			// to a call of the harness's own recorded response.
			if st.dispatchedAt[c.ID] > requeueAfter {
				service, memPath, err := checkCall(c.Name, input)
				if err == nil && s.decide(st, c, input).verdict == policy.Allow && service == st.dispatched[c.ID] {
					queue = append(queue, toQueue{s.toolCall(st, c, input, memPath), service})
					s.metrics.dispatch.WithLabelValues(metrics.Tool(c.Name), service).Inc()
				}
			}
			continue
		}
		service, memPath, err := checkCall(c.Name, input)
		if err == nil {
			// Refused before the policy may hold it: no reviewer is asked
			// about a call that would be refused anyway.
			err = readFirst(st, c.Name, service, memPath)
		}
		var held bool
		if err == nil {
			held, err = s.gate(ctx, st, c, input, service, memPath)
		}
		if held {
			s.metrics.dispatch.WithLabelValues(metrics.Tool(c.Name), "held").Inc()
			continue // until a reviewer decides
		}
		if err != nil {
			s.metrics.dispatch.WithLabelValues(metrics.Tool(c.Name), "refused").Inc()
			res := event.ToolCompleted{
				Header:  event.NewHeader(event.TypeToolCompleted, st.tenant, st.session),
				Call:    c.ID,
				Name:    c.Name,
				Output:  "Error: " + err.Error(),
				IsError: true,
			}
			if err := s.append(ctx, st, &res, c.ID.String()+":result"); err != nil {
				return err
			}
			continue
		}
		if err := s.recordDispatched(ctx, st, c, input, service); err != nil {
			return err
		}
		queue = append(queue, toQueue{s.toolCall(st, c, input, memPath), service})
		s.metrics.dispatch.WithLabelValues(metrics.Tool(c.Name), service).Inc()
	}
	var after uint64
	if !st.stale {
		after = st.seq
	}
	for _, q := range queue {
		q.call.After = after
		if s.cfg.CallKey != nil {
			q.call.Sign(s.cfg.CallKey, q.service)
		}
		if err := bus.Publish(ctx, s.js, bus.ToolSubject(q.service, st.tenant, st.session), q.call.Call.String(), &q.call); err != nil {
			return err
		}
	}
	return nil
}

// toQueue is a call on its way to the queue of the service that runs it.
type toQueue struct {
	call    event.ToolCall
	service string
}

func (s *Service) toolCall(st *state, c event.Call, input json.RawMessage, memPath string) event.ToolCall {
	call := event.ToolCall{
		Header: event.NewHeader(event.TypeToolCall, st.tenant, st.session),
		Call:   c.ID,
		Turn:   st.pending.Turn,
		User:   st.user,
		Name:   c.Name,
		Input:  input,
	}
	if c.Name == tool.Write || c.Name == tool.Edit {
		call.ExpectVersion = st.versions[memPath]
	}
	return call
}

// requeueAfter returns the sequence after which a call recorded as
// dispatched may not have been queued, for the step ctx was made for: the
// sequence of its trigger. A call recorded after the trigger was stored
// was dispatched by a run of this trigger, or of one that came before it
// and is redelivered in turn, and either may have died before queueing
// it; one recorded before was dispatched by an earlier trigger's step,
// which the trigger's own redelivery takes up if it did not finish.
//
// The trigger's delivery count does not say this: a server that restarts
// from its store may deliver again, as new, a message it had delivered.
func requeueAfter(ctx context.Context) uint64 {
	m, ok := bus.Delivery(ctx)
	if !ok {
		return math.MaxUint64
	}
	return m.StreamSeq
}

func (s *Service) recordDispatched(ctx context.Context, st *state, c event.Call, input json.RawMessage, service string) error {
	d := event.ToolDispatched{
		Header:  event.NewHeader(event.TypeToolDispatched, st.tenant, st.session),
		Call:    c.ID,
		Turn:    st.pending.Turn,
		Name:    c.Name,
		Summary: event.Summary(input),
		Service: service,
	}
	return s.append(ctx, st, &d, c.ID.String()+":dispatched")
}

// backfillDispatched records the dispatch of calls that were put on the
// queue, and have run, but whose harness died before recording that it
// dispatched them, so that every call that ran shows in the log as
// dispatched. Calls refused by [checkCall] or the policy were never
// dispatched.
func (s *Service) backfillDispatched(ctx context.Context, st *state) error {
	for _, c := range st.pending.Calls {
		input := st.pending.Input(c)
		if st.dispatched[c.ID] != "" {
			continue
		}
		service, _, err := checkCall(c.Name, input)
		if err != nil || s.decide(st, c, input).verdict != policy.Allow {
			continue
		}
		if err := s.recordDispatched(ctx, st, c, input, service); err != nil {
			return err
		}
		st.dispatched[c.ID] = service
	}
	return nil
}

// gate applies the tenant's policy to a call, which service would run
// (on memPath, for the memory service): it returns an error for a call
// that must not run, with the reason for the model, and held for a call
// that waits for a reviewer, after asking for the approval.
func (s *Service) gate(ctx context.Context, st *state, c event.Call, input json.RawMessage, service, memPath string) (held bool, err error) {
	v := s.decide(st, c, input)
	switch v.verdict {
	case policy.Deny:
		return false, errors.New(v.reason)
	case policy.Approve:
		if st.asked[c.ID] {
			return true, nil
		}
		ev := event.ApprovalRequested{
			Header:   event.NewHeader(event.TypeApprovalRequested, st.tenant, st.session),
			Call:     c.ID,
			Turn:     st.pending.Turn,
			User:     st.user,
			Tool:     c.Name,
			Input:    input,
			ArgsHash: event.ArgsHash(c.Name, input),
			Rule:     v.rule,
			Reason:   v.reason,
			Preview:  s.preview(ctx, st, c, input, service, memPath),
		}
		if err := s.append(ctx, st, &ev, c.ID.String()+":approval"); err != nil {
			return false, err
		}
		st.asked[c.ID] = true
		return true, nil
	}
	return false, nil
}

// verdict is what may be done with a call: allow (run it), deny (refuse it
// for reason) or approve (ask a reviewer under rule).
type verdict struct {
	verdict, rule, reason string
}

// decide applies the policy and any reviewer's decision to a call. A
// decision counts only if it verifies: signed by the approval service, for
// this very call and these arguments; others are ignored and logged.
func (s *Service) decide(st *state, c event.Call, input json.RawMessage) verdict {
	d := s.cfg.Policy.Decide(policy.Call{Tenant: st.tenant, User: st.user, Tool: c.Name, Input: input})
	switch d.Decision {
	case policy.Deny:
		return verdict{policy.Deny, d.Rule, fmt.Sprintf("refused by policy (rule %s): %s", d.Rule, d.Reason)}
	case policy.Approve:
		if s.cfg.ApprovalKey == nil {
			return verdict{policy.Deny, d.Rule, fmt.Sprintf("this call needs a reviewer's approval under policy rule %s (%s), and this deployment takes no approvals, so it was not run", d.Rule, d.Reason)}
		}
		dec := s.decision(st, c.ID, event.ArgsHash(c.Name, input))
		switch {
		case dec == nil:
			return verdict{policy.Approve, d.Rule, d.Reason}
		case dec.Approved:
			return verdict{policy.Allow, d.Rule, ""}
		}
		why := dec.Reason
		if why == "" {
			why = "no reason given"
		}
		return verdict{policy.Deny, d.Rule, fmt.Sprintf("a reviewer (%s) denied this call, held under policy rule %s: %s", dec.Reviewer, d.Rule, why)}
	}
	return verdict{policy.Allow, d.Rule, ""}
}

// decision returns the first decision recorded on approval id that
// verifies: signed by the approval service, for this session and id and
// arguments hashing to hash. Others are ignored, and logged.
func (s *Service) decision(st *state, id uuid.UUID, hash string) *event.ApprovalDecided {
	for _, dec := range st.decisions[id] {
		if err := dec.Verify(s.cfg.ApprovalKey, st.tenant, st.session, id, hash); err != nil {
			s.log.Warn("ignoring a decision that does not verify", "session", st.session, "approval", id, "reviewer", dec.Reviewer, "err", err)
			continue
		}
		return dec
	}
	return nil
}

// readFirst refuses an Edit of a memory or skill file this session has
// neither read nor written, as the memory service would: such a file
// either does not exist (an Edit cannot create it) or has a version the
// session has not seen.
func readFirst(st *state, name, service, memPath string) error {
	if name != tool.Edit || service != bus.ServiceMemory || st.versions[memPath] != 0 {
		return nil
	}
	return fmt.Errorf("%s: this session has not read it: Read it first (an Edit changes a file that exists, as last read), then make your change", memPath)
}

// checkCall refuses calls that cannot run as written, in words the model
// can act on, and returns the service that runs the others, with the
// path of the memory or skill file they name, if any.
func checkCall(name string, input json.RawMessage) (service, memPath string, err error) {
	args, err := tool.Parse(name, input)
	if err != nil {
		return "", "", err
	}
	var p string
	switch a := args.(type) {
	case *tool.ReadArgs:
		p = a.FilePath
	case *tool.WriteArgs:
		p = a.FilePath
	case *tool.EditArgs:
		p = a.FilePath
	case *tool.GlobArgs:
		p = a.Path
	case *tool.GrepArgs:
		p = a.Path
	}
	if tool.ForMemory(args) {
		p, err := tool.MemoryPath(p)
		return bus.ServiceMemory, p, err
	}
	_, err = tool.WorkspacePath(p)
	return bus.ServiceSandbox, "", err
}

func (s *Service) complete(ctx context.Context, st *state) error {
	ev := event.SessionCompleted{
		Header: event.NewHeader(event.TypeSessionCompleted, st.tenant, st.session),
		Answer: model.Response{Content: st.answered.Content}.Text(),
		Turns:  st.turn,
		Usage:  st.usage,
	}
	if err := s.append(ctx, st, &ev, fmt.Sprintf("%s:completed:%d", st.session, st.turn)); err != nil {
		return err
	}
	s.metrics.ended.WithLabelValues("completed").Inc()
	return nil
}

func systemPrompt(st *state, skills []event.Skill) string {
	var b strings.Builder
	fmt.Fprintf(&b, `You are an agent run by Corral for user %q of tenant %q.
You work in a sandbox: /workspace is your working directory; the sandbox has no network. Bash always runs there.
Besides /workspace, the file tools (Read, Write, Edit, Glob, Grep) reach two shared trees:
- /memories: what this organisation's agent has learnt, shared by everyone in the tenant; /memories/private is your user's alone. Read what is relevant before you start, and write down what later sessions should know.
- /skills: one folder per skill, each with a SKILL.md. Read a skill's files when its description fits the task.
Before you Write or Edit an existing file under /memories or /skills, Read it: a write to a file you have not read, or that changed since you read it, is refused.
Use the tools to do the work. File paths are absolute. When you are done, reply with your answer and make no tool call.`,
		st.user, st.tenant)
	if len(skills) > 0 {
		b.WriteString("\n\nAvailable skills:\n")
		for _, sk := range skills {
			fmt.Fprintf(&b, "- %s: %s (%s)\n", sk.Name, sk.Description, sk.Path)
		}
	}
	return b.String()
}
