package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/envconf"
	"corral.dev/pkg/event"
	"corral.dev/pkg/metrics"
	"corral.dev/pkg/model"
	"corral.dev/pkg/modelinfo"
	"corral.dev/pkg/tool"
	"corral.dev/services/harness/internal/core"
)

// contextFor returns the context window of st's model as [core.Next]
// compacts by it: the model table's window, what each request keeps for
// output, and the configured threshold.
func (s *Service) contextFor(st *state) core.Context {
	info := s.cfg.Models.Lookup(st.Model)
	output, thinking := s.output(info)
	return core.Context{
		Window:      info.ContextWindow,
		Output:      output + thinking,
		Threshold:   s.cfg.CompactThreshold,
		Target:      s.cfg.CompactThreshold * 2 / 3,
		KeepResults: s.cfg.CompactKeepResults,
		// The system prompt without the skills list: what the estimate
		// counts before the first response reports the real count.
		Overhead:      (toolSpecBytes() + len(systemPrompt(st, nil))) / 4,
		SummaryTokens: min(maxSummaryTokens, info.ContextWindow/8, output),
	}
}

// maxSummaryTokens bounds a summary: enough to carry a long session's
// state, small beside any current model's window.
const maxSummaryTokens = 4096

var toolSpecBytes = sync.OnceValue(func() int {
	b, _ := json.Marshal(tool.Specs())
	return len(b)
})

// output returns the output limit of a request to a model of info and
// the extended thinking it asks for: CORRAL_MAX_TOKENS and
// CORRAL_THINKING_BUDGET (for a model that thinks), which the Anthropic
// client asks for together, lowered to fit the most the model may write.
func (s *Service) output(info modelinfo.Info) (maxTokens, thinking int) {
	maxTokens = s.cfg.MaxTokens
	if info.MaxOutput > 0 {
		maxTokens = min(maxTokens, info.MaxOutput)
	}
	if s.cfg.ThinkingBudget <= 0 || !info.Can(modelinfo.Thinking) {
		return maxTokens, 0
	}
	thinking = s.cfg.ThinkingBudget
	if info.MaxOutput > 0 && maxTokens+thinking > info.MaxOutput {
		// The answer gives way to the thinking, down to a quarter of
		// what the model may write.
		maxTokens = max(info.MaxOutput-thinking, info.MaxOutput/4)
		thinking = info.MaxOutput - maxTokens
	}
	return maxTokens, thinking
}

// shape sets what req asks of the model modelName names by the model
// table: its output limit, and the configured extended thinking or
// reasoning effort where the model has it (a model without asks for
// neither: the providers refuse what a model cannot do).
func (s *Service) shape(req *model.Request, modelName string) {
	info := s.cfg.Models.Lookup(modelName)
	req.MaxTokens, req.Thinking = s.output(info)
	if s.cfg.ReasoningEffort != "" && info.Can(modelinfo.ReasoningEffort) {
		req.ReasoningEffort = s.cfg.ReasoningEffort
	}
}

// compact carries out a compaction [core.Next] decided: it asks the model
// for the summary, if the compaction has one, and records the compaction,
// which folds into st. A summary the model could not write for good (a
// permanent error) fails the session, as a turn would.
//
// Recorded under an ID of the session's request and turn, it is made once
// for them: a harness that finds it in the log after a crash folds it in
// and asks the model with what the one before it would have.
func (s *Service) compact(ctx context.Context, st *state, env core.Env, c core.Compact) error {
	ev := &event.ContextCompacted{
		Header:            event.NewHeader(event.TypeContextCompacted, st.Tenant, st.Session),
		Turn:              st.Turn,
		ClearedThrough:    c.ClearThrough,
		SummarizedThrough: c.SummarizeThrough,
		User:              st.User,
		TokensBefore:      c.Tokens,
		TokensAfter:       c.After,
	}
	if c.SummarizeThrough > 0 {
		resp, err := s.summarise(ctx, st, env, c)
		if err != nil || resp == nil {
			return err
		}
		ev.Summary, ev.Model, ev.Usage = resp.Text(), st.Model, resp.Usage
		if strings.TrimSpace(ev.Summary) == "" || resp.Refusal != "" {
			// No summary to go on from (a reasoning model spent its
			// tokens thinking, or the model refused): the older turns
			// stay, and only what was cleared is; what it cost counts.
			s.log.WarnContext(ctx, "the model wrote no summary; only old results are cleared", "session", st.Session, "turn", st.Turn, "refusal", resp.Refusal)
			ev.SummarizedThrough, ev.Summary = 0, ""
		}
	}
	if err := s.appendNew(ctx, st, ev, fmt.Sprintf("%s:compacted:%s:%d", st.Session, st.LastRequest, st.Turn)); err != nil {
		return err
	}
	if ev.Model != "" {
		s.days.spentOn(st.Tenant, st.User, ev.Time, ev.Model, ev.Usage, 0)
	}
	s.log.InfoContext(ctx, "conversation compacted", "session", st.Session, "turn", st.Turn, "cleared_through", ev.ClearedThrough,
		"summarized_through", ev.SummarizedThrough, "tokens_before", ev.TokensBefore, "tokens_after", ev.TokensAfter)
	return nil
}

// summaryRequest is what the model is asked, after the conversation it is
// to summarise, for the summary.
const summaryRequest = `[Corral] This conversation is about to be compacted to fit your context window: all of it up to here will be replaced by the summary you write now, and you will go on from that summary and the latest turns alone. Write the summary for yourself: the user's requests (in their words where short), what was decided and why, what was done (files changed, commands run and what they showed), what failed and what was learnt, and what is left to do. Name files, functions, commands and values exactly. Do not call any tool; reply with the summary alone.`

// summarise asks the model for a summary of the conversation c cuts off.
// The request is the session's own (system prompt, tools, conversation up
// to the cut, with the instruction after it), so that the provider reads
// the most of it from the session's cached prompt. It returns nil, nil
// when the failure was recorded as the session's.
func (s *Service) summarise(ctx context.Context, st *state, env core.Env, c core.Compact) (*model.Response, error) {
	client, name, err := s.providers.Resolve(st.Model)
	if err != nil {
		return nil, s.fail(ctx, st, modelCode(err), err.Error())
	}
	skills, err := s.skills.load(ctx, st.Tenant)
	if err != nil {
		return nil, err
	}
	req := model.Request{
		Model:    name,
		System:   systemPrompt(st, skills),
		Messages: withRequest(c.Older, summaryRequest),
		Tools:    st.Specs(),
	}
	// Thinking and reasoning as the session's turns ask: the API takes
	// back their thinking blocks only with thinking on, and the cached
	// prompt holds only for the same settings.
	s.shape(&req, st.Model)
	req.MaxTokens = env.Context.SummaryTokens
	if s.cfg.PromptCache {
		req.CacheKey = bus.SessionKey(st.Tenant, st.Session)
		req.CacheTTL = s.cacheTTL(st)
	}
	start := time.Now()
	resp, err := client.Complete(ctx, req)
	provider, _, _ := strings.Cut(st.Model, ":")
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	s.metrics.model.WithLabelValues(metrics.OneOf(provider, "openai", "anthropic"), outcome).Observe(time.Since(start).Seconds())
	if errors.Is(err, model.ErrPermanent) {
		return nil, s.fail(ctx, st, event.CodeModelError, "summarise the conversation to fit the context window: "+err.Error())
	}
	if err != nil {
		return nil, fmt.Errorf("ask %s for a summary before turn %d: %w", st.Model, st.Turn+1, err)
	}
	return &resp, nil
}

// withRequest returns msgs with text added to its last message, a user's
// (the conversation is cut before a response of the model), or as a user
// message of its own after an assistant's. msgs is not changed.
func withRequest(msgs []model.Message, text string) []model.Message {
	block := model.Block{Type: model.TextBlock, Text: text}
	out := slices.Clone(msgs)
	if n := len(out); n > 0 && out[n-1].Role == model.User {
		last := out[n-1]
		out[n-1] = model.Message{Role: model.User, Content: append(slices.Clip(last.Content), block)}
		return out
	}
	return append(out, model.Message{Role: model.User, Content: []model.Block{block}})
}

// spentOn notes what a session of tenant and user spent at t on
// modelName, counting steps model turns, in the usage read for their
// daily budgets, as [dayUsages.spent] does for a response.
func (d *dayUsages) spentOn(tenant, user string, t time.Time, modelName string, u model.Usage, steps int) {
	p := d.price(modelName, u)
	p.Steps = steps
	day := t.UTC().Format(time.DateOnly)
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, key := range []string{bus.UsageKey(tenant, day, ""), bus.UsageKey(tenant, day, user)} {
		if c, ok := d.cache.Get(key); ok {
			c.since.Add(p)
			d.cache.Add(key, c)
		}
	}
}

// loadContext reads the settings of context management and model
// capabilities into cfg: the model table (CORRAL_MODELS), the compaction
// threshold and what it keeps, the tool output cap, and the thinking and
// reasoning asked of the models that have them. Errors name the variable.
func loadContext(getenv func(string) string, cfg *Config) error {
	cfg.Models = modelinfo.Default()
	if f := getenv("CORRAL_MODELS"); f != "" {
		c, err := modelinfo.Load(f)
		if err != nil {
			return fmt.Errorf("CORRAL_MODELS: %w", err)
		}
		cfg.Models = c
	}
	cfg.CompactThreshold = 0.75
	if v := getenv("CORRAL_COMPACT_THRESHOLD"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f > 0 && f <= 1) {
			return fmt.Errorf("CORRAL_COMPACT_THRESHOLD=%q: want a share of the context window above 0 and at most 1, such as 0.75", v)
		}
		cfg.CompactThreshold = f
	}
	var err error
	if cfg.CompactKeepResults, err = envconf.Int(getenv, "CORRAL_COMPACT_KEEP_RESULTS", 3); err != nil {
		return err
	}
	if cfg.ToolOutputCap, err = envconf.Count(getenv, "CORRAL_TOOL_OUTPUT_CAP", 32<<10); err != nil {
		return err
	}
	if cfg.ThinkingBudget, err = envconf.Count(getenv, "CORRAL_THINKING_BUDGET", 0); err != nil {
		return err
	}
	if b := cfg.ThinkingBudget; b > 0 && b < 1024 {
		return fmt.Errorf("CORRAL_THINKING_BUDGET=%d: want at least 1024 tokens, the provider's least, or 0 for no extended thinking", b)
	}
	cfg.ReasoningEffort, err = envconf.OneOf(getenv, "CORRAL_REASONING_EFFORT", "", "minimal", "low", "medium", "high")
	return err
}
