package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/metrics"
	"corral.dev/pkg/model"
	"corral.dev/pkg/tool"
	"corral.dev/services/harness/internal/core"
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
	if err != nil {
		release(false)
		return err
	}
	err = fn(ctx, st)
	s.keep(st, err != nil)
	if err != nil {
		release(false)
		return err
	}
	// A running session's next step most often comes here soon.
	release(st.Status == core.StatusRunning && s.cfg.Speedups.Linger && !s.stopping.Load())
	return nil
}

// step does what comes next for the session, as [core.Next] decides,
// until it waits: for calls, a reviewer, a raise of its budget, or nothing
// (a session that is not running). Having asked the model, compacted the
// conversation or resumed the session, it decides again with that
// recorded.
func (s *Service) step(ctx context.Context, st *state) error {
	env, err := s.env(ctx, st)
	if err != nil {
		return err
	}
next:
	for {
		var queue []toQueue
		var ask *core.AskModel
		for _, a := range core.Next(st.State, env) {
			switch a := a.(type) {
			case core.AskModel:
				ask = &a
			case core.Dispatch:
				if !a.Recorded {
					if err := s.recordDispatched(ctx, st, a.Call, a.Service); err != nil {
						return err
					}
				}
				queue = append(queue, toQueue{s.toolCall(st, a.Call, a.MemPath), a.Service})
				s.metrics.dispatch.WithLabelValues(metrics.Tool(a.Call.Name), a.Service).Inc()
			case core.Prepare:
				call, err := s.prepareCall(ctx, st, a)
				if err != nil {
					return err
				}
				queue = append(queue, toQueue{call, bus.ServiceSandbox})
				s.metrics.dispatch.WithLabelValues(metrics.Tool(event.PrepareTool), bus.ServiceSandbox).Inc()
			case core.RecordDispatched:
				if err := s.recordDispatched(ctx, st, a.Call, a.Service); err != nil {
					return err
				}
			case core.Hold:
				s.metrics.dispatch.WithLabelValues(metrics.Tool(a.Call.Name), "held").Inc()
				if !a.Asked {
					if err := s.askApproval(ctx, st, a); err != nil {
						return err
					}
				}
			case core.Refuse:
				s.metrics.dispatch.WithLabelValues(metrics.Tool(a.Call.Name), "refused").Inc()
				if err := s.refuse(ctx, st, a); err != nil {
					return err
				}
			case core.Complete:
				return s.complete(ctx, st, a.Answer)
			case core.Fail:
				return s.end(ctx, st, a)
			case core.Pause:
				return s.pause(ctx, st, a)
			case core.Resume:
				if err := s.resume(ctx, st, a); err != nil {
					return err
				}
				if st.Status == core.StatusPaused {
					// Resumed already, by a step whose events st lacks:
					// the next step reads them.
					return nil
				}
				continue next // Next resumes alone
			case core.Compact:
				if err := s.compact(ctx, st, env, a); err != nil {
					return err
				}
				// Writing the summary may have taken as long as a turn:
				// a stop, failure or pause recorded meanwhile ends the
				// step here, as after asking, before the model is asked
				// again.
				if st.stale {
					if ended, err := s.endedSince(ctx, st); err != nil || ended {
						return err
					}
				}
				continue next // Next asks with the conversation compacted
			}
		}
		if err := s.queue(ctx, st, queue); err != nil {
			return err
		}
		if ask == nil {
			return nil
		}
		if ev, err := s.ask(ctx, st, env, ask.Messages); err != nil || ev == nil {
			return err
		}
		// The model may have taken a while: a stop or a failure (wall
		// time) recorded meanwhile ends the session here. The response
		// was recorded on the condition that nothing came after what st
		// was folded from; only if something did is the log looked at.
		if st.stale {
			if ended, err := s.endedSince(ctx, st); err != nil || ended {
				return err
			}
		}
		env.Asked = true
	}
}

// env is what a step of st's session knows besides its log: the policy,
// the approval key, the time, and what its user and tenant spent today
// where daily budgets are set.
func (s *Service) env(ctx context.Context, st *state) (core.Env, error) {
	env := core.Env{
		Policy:       s.cfg.Policy,
		ApprovalKey:  s.cfg.ApprovalKey,
		MaxTurns:     s.cfg.MaxTurns,
		Now:          time.Now(),
		RequeueAfter: requeueAfter(ctx),
		Context:      s.contextFor(st),
		Ignored: func(dec *event.ApprovalDecided, err error) {
			s.log.Warn("ignoring a decision that does not verify", "session", st.Session, "approval", dec.Call, "reviewer", dec.Reviewer, "err", err)
		},
	}
	if st.Status != core.StatusRunning && st.Status != core.StatusPaused {
		return env, nil
	}
	user, tenant := core.DailyBudgets(st.State, s.cfg.Policy)
	day := env.Now.UTC().Format(time.DateOnly)
	var err error
	if user {
		if env.UserDay, err = s.days.recent(ctx, bus.UsageKey(st.Tenant, day, st.User)); err != nil {
			return env, err
		}
	}
	if tenant {
		if env.TenantDay, err = s.days.recent(ctx, bus.UsageKey(st.Tenant, day, "")); err != nil {
			return env, err
		}
	}
	return env, nil
}

// endedSince reports whether the session was stopped, failed or paused
// after the events st was folded from (a stop counts only from the
// session's user).
func (s *Service) endedSince(ctx context.Context, st *state) (bool, error) {
	entries, err := s.logs.Read(ctx, st.trust.Clone(), st.Seq)
	if err != nil {
		return false, fmt.Errorf("look for a stop: %w", err)
	}
	for _, e := range entries {
		if e.Type == event.TypeSessionStopped || e.Type == event.TypeSessionFailed || e.Type == event.TypeSessionPaused {
			return true, nil
		}
	}
	return false, nil
}

// ask calls the model for the session's next turn, with messages, and
// records its response. It returns nil, nil when the failure was recorded
// as the session's.
func (s *Service) ask(ctx context.Context, st *state, env core.Env, messages []model.Message) (*event.ModelResponded, error) {
	client, name, err := s.providers.Resolve(st.Model)
	if err != nil {
		return nil, s.fail(ctx, st, modelCode(err), err.Error())
	}
	skills, err := s.skills.load(ctx, st.Tenant)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	req := model.Request{
		Model:     name,
		System:    systemPrompt(st, skills),
		Messages:  messages,
		Tools:     st.Specs(),
		MaxTokens: s.cfg.MaxTokens,
		// Shown as it streams; recorded whole below.
		OnDelta: s.liveOutput(st, st.Turn+1),
	}
	// The output limit lowered to the model's, and thinking or reasoning
	// effort for a model that has them, by the model table.
	s.shape(&req, st.Model)
	if s.cfg.PromptCache {
		// One key per session: its prompt grows turn by turn, and each
		// turn reads back what the one before cached.
		req.CacheKey = bus.SessionKey(st.Tenant, st.Session)
		req.CacheTTL = s.cacheTTL(st)
	}
	resp, err := client.Complete(ctx, req)
	provider, _, _ := strings.Cut(st.Model, ":")
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	s.metrics.model.WithLabelValues(metrics.OneOf(provider, "openai", "anthropic"), outcome).Observe(time.Since(start).Seconds())
	if errors.Is(err, model.ErrPermanent) {
		return nil, s.fail(ctx, st, event.CodeModelError, err.Error())
	}
	if err != nil {
		return nil, fmt.Errorf("ask %s for turn %d: %w", st.Model, st.Turn+1, err)
	}
	ev := &event.ModelResponded{
		Header:     event.NewHeader(event.TypeModelResponded, st.Tenant, st.Session),
		Turn:       st.Turn + 1,
		Model:      st.Model,
		Content:    resp.Content,
		StopReason: resp.StopReason,
		Refusal:    resp.Refusal,
		Usage:      resp.Usage,
		User:       st.User,
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
	s.log.DebugContext(ctx, "model responded", "session", st.Session, "turn", ev.Turn, "calls", len(ev.Calls))
	// Recorded before anything acts on it: a harness that dies after this
	// reuses the response instead of asking again. A duplicate means
	// another response was recorded for this turn first; acting on this one
	// would run calls the log does not hold, so the step starts over.
	if err := s.appendNew(ctx, st, ev, fmt.Sprintf("%s:turn:%d", st.Session, ev.Turn)); err != nil {
		return nil, err
	}
	s.days.spent(st.Tenant, st.User, ev)
	return ev, nil
}

// queue puts calls on the work queues of the services that run them, each
// signed, in the order decided. A call is recorded as dispatched (by a
// tool.dispatched event) before it goes on the queue, so
// that its result follows every event this step records: the call names
// the last of them (After), and its result is recorded right after it when
// nothing else came in between, which the next step folds in without
// reading the log.
func (s *Service) queue(ctx context.Context, st *state, queue []toQueue) error {
	var after uint64
	if !st.stale {
		after = st.Seq
	}
	for _, q := range queue {
		q.call.After = after
		if s.cfg.CallKey != nil {
			q.call.Sign(s.cfg.CallKey, q.service)
		}
		if err := bus.Publish(ctx, s.js, bus.ToolSubject(q.service, st.Tenant, st.Session), q.call.Call.String(), &q.call); err != nil {
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

func (s *Service) toolCall(st *state, c event.Call, memPath string) event.ToolCall {
	call := event.ToolCall{
		Header: event.NewHeader(event.TypeToolCall, st.Tenant, st.Session),
		Call:   c.ID,
		Turn:   st.Pending.Turn,
		User:   st.User,
		Name:   c.Name,
		Input:  st.Pending.Input(c),
		// Known to the service the call is queued for alone.
		ResultID: s.logs.ResultID(st.Tenant, st.Session, c.ID),
	}
	if c.Name == tool.Write || c.Name == tool.Edit {
		call.ExpectVersion = st.Versions[memPath]
	}
	return call
}

// prepareCall returns the call that prepares the session's workspace,
// having recorded that it was dispatched unless it was.
func (s *Service) prepareCall(ctx context.Context, st *state, p core.Prepare) (event.ToolCall, error) {
	input, err := json.Marshal(p.Input)
	if err != nil {
		return event.ToolCall{}, err
	}
	if !p.Recorded {
		ev := &event.ToolDispatched{
			Header:  event.NewHeader(event.TypeToolDispatched, st.Tenant, st.Session),
			Call:    p.Call,
			Name:    event.PrepareTool,
			Summary: event.Summary(input),
			Service: bus.ServiceSandbox,
		}
		if err := s.append(ctx, st, ev, p.Call.String()+":dispatched"); err != nil {
			return event.ToolCall{}, err
		}
	}
	return event.ToolCall{
		Header:   event.NewHeader(event.TypeToolCall, st.Tenant, st.Session),
		Call:     p.Call,
		User:     st.User,
		Name:     event.PrepareTool,
		Input:    input,
		ResultID: s.logs.ResultID(st.Tenant, st.Session, p.Call),
	}, nil
}

// requeueAfter returns the sequence after which a call recorded as
// dispatched may not have been queued, for the step ctx was made for: the
// sequence of its trigger (see [core.Env.RequeueAfter]).
//
// The trigger's delivery count does not say this: a server that restarts
// from its store may deliver again, as new, a message it had delivered.
func requeueAfter(ctx context.Context) uint64 {
	m, ok := bus.Delivery(ctx)
	if !ok {
		return core.NoRequeue
	}
	return m.StreamSeq
}

func (s *Service) recordDispatched(ctx context.Context, st *state, c event.Call, service string) error {
	return s.append(ctx, st, event.NewToolDispatched(st.Pending, c, service), c.ID.String()+":dispatched")
}

// askApproval asks a reviewer about a call the policy holds.
func (s *Service) askApproval(ctx context.Context, st *state, h core.Hold) error {
	input := st.Pending.Input(h.Call)
	ev := event.ApprovalRequested{
		Header:   event.NewHeader(event.TypeApprovalRequested, st.Tenant, st.Session),
		Call:     h.Call.ID,
		Turn:     st.Pending.Turn,
		User:     st.User,
		Tool:     h.Call.Name,
		Input:    input,
		ArgsHash: event.ArgsHash(h.Call.Name, input),
		Rule:     h.Rule,
		Reason:   h.Reason,
		Preview:  s.preview(ctx, st, h.Call, h.Service, h.MemPath),
	}
	return s.append(ctx, st, &ev, h.Call.ID.String()+":approval")
}

// refuse records the result of a call that does not run: an error saying
// why.
func (s *Service) refuse(ctx context.Context, st *state, r core.Refuse) error {
	res := event.ToolCompleted{
		Header:  event.NewHeader(event.TypeToolCompleted, st.Tenant, st.Session),
		Call:    r.Call.ID,
		Name:    r.Call.Name,
		Output:  "Error: " + r.Reason,
		IsError: true,
	}
	return s.append(ctx, st, &res, r.Call.ID.String()+":result")
}

func (s *Service) complete(ctx context.Context, st *state, answer string) error {
	ev := event.SessionCompleted{
		Header:  event.NewHeader(event.TypeSessionCompleted, st.Tenant, st.Session),
		Answer:  answer,
		Turns:   st.Turn,
		Usage:   st.Usage,
		Changes: st.Changes,
	}
	if err := s.append(ctx, st, &ev, fmt.Sprintf("%s:completed:%d", st.Session, st.Turn)); err != nil {
		return err
	}
	s.metrics.ended.WithLabelValues("completed").Inc()
	return nil
}

// end records the failure [core.Next] decided: over the tenant's daily
// budget, or at the turn limit.
func (s *Service) end(ctx context.Context, st *state, f core.Fail) error {
	if f.Budget == "" {
		return s.fail(ctx, st, f.Code, f.Reason)
	}
	return s.failOverBudget(ctx, st, f)
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
		st.User, st.Tenant)
	if len(st.Config.Tools) > 0 {
		fmt.Fprintf(&b, "\nThis session offers you only these tools: %s.", strings.Join(st.Config.Tools, ", "))
	}
	if len(st.Config.Ask) > 0 {
		fmt.Fprintf(&b, "\nEvery %s call waits for a reviewer's approval before it runs.", strings.Join(st.Config.Ask, " or "))
	}
	if st.Config.System != "" {
		// After Corral's, which it cannot replace; before the skills,
		// which change between turns, so that the prompt's stable start
		// stays cached.
		b.WriteString("\n\nInstructions for this session:\n")
		b.WriteString(st.Config.System)
	}
	if len(skills) > 0 {
		b.WriteString("\n\nAvailable skills:\n")
		for _, sk := range skills {
			fmt.Fprintf(&b, "- %s: %s (%s)\n", sk.Name, sk.Description, sk.Path)
		}
	}
	return b.String()
}
