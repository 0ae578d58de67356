package harness

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/event"
	"corral.dev/pkg/model"
	"corral.dev/pkg/modelinfo"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
)

// stepsModel makes a numbered Bash call each turn, the next after the
// last it sees (turns summarised away leave the last ones), until the
// last; it answers a request for a summary with one.
func stepsModel(last int) modeltest.Script {
	return func(c modeltest.Conversation) (modeltest.Turn, error) {
		if n := len(c.Messages); n > 0 && strings.Contains(c.Messages[n-1].Text, "[Corral] This conversation is about to be compacted") {
			return modeltest.Turn{Text: fmt.Sprintf("Summary: steps done so far, the last %d.", lastStep(c))}, nil
		}
		next := lastStep(c) + 1
		if next > last {
			return modeltest.Turn{Text: fmt.Sprintf("all %d steps done", last)}, nil
		}
		return modeltest.Turn{Text: fmt.Sprint("step ", next), Calls: []modeltest.Call{bashCall(fmt.Sprintf("make step N=%d", next))}}, nil
	}
}

// lastStep returns the number of the last step the conversation shows a
// call of.
func lastStep(c modeltest.Conversation) int {
	n := 0
	for _, m := range c.Messages {
		for _, call := range m.Calls {
			var in struct{ Command string }
			raw, _ := call.Input.(json.RawMessage)
			_ = json.Unmarshal(raw, &in)
			_, _ = fmt.Sscanf(in.Command, "make step N=%d", &n)
		}
	}
	return n
}

// modelsFile writes a model table and returns its file.
func modelsFile(t *testing.T, yaml string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "models.yaml")
	if err := os.WriteFile(f, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// A session whose outputs add up to more than three times its model's
// window completes, the provider refusing none of its requests as too
// long: the log records its compactions, results cleared and older turns
// summarised, and the summaries' usage counts in the session's.
func TestLongSessionIsCompacted(t *testing.T) {
	const window, steps = 16000, 30
	_, _, js := natstest.Run(t)
	fake := modeltest.New(t, stepsModel(steps))
	fake.SetContextWindow(window)
	runHarnessWith(t, js, fake, map[string]string{
		"CORRAL_MODELS":       modelsFile(t, fmt.Sprintf("%q: {context_window: %d}\n", "openai:m", window)),
		"CORRAL_MAX_TOKENS":   "1024",
		"CORRAL_MAX_TURNS":    "100",
		"CORRAL_PROMPT_CACHE": "off",
	})
	line := strings.Repeat("a line of the build's output, \"quoted\"\n", 200) // 8 KB
	startTools(t, js, output(line))
	session := uuid.Must(uuid.NewV7())
	request(t, js, session, "make every step")
	done := completion(t, js, session)
	if done.Answer != fmt.Sprintf("all %d steps done", steps) || done.Turns != steps+1 {
		t.Fatalf("the session answered %q in %d turns", done.Answer, done.Turns)
	}
	evs := logOf(t, js, "acme", session)
	compactions := ofType[*event.ContextCompacted](evs)
	var summaries int
	var summarised model.Usage
	for _, c := range compactions {
		if c.Summary != "" {
			summaries++
			summarised.Add(c.Usage)
		}
	}
	if len(compactions) < 2 || summaries == 0 {
		t.Fatalf("%d compactions, %d with a summary: want clearing and summaries", len(compactions), summaries)
	}
	if steps*len(line)/4 < 3*window {
		t.Fatalf("the outputs take %d tokens: not three windows", steps*len(line)/4)
	}
	var responded model.Usage
	for _, r := range ofType[*event.ModelResponded](evs) {
		responded.Add(r.Usage)
	}
	responded.Add(summarised)
	if done.Usage != responded {
		t.Errorf("the session's usage is %+v, its responses' and summaries' %+v", done.Usage, responded)
	}
	for i, r := range fake.Requests() {
		if r.MaxTokens > 2500 {
			t.Errorf("request %d asks for %d output tokens", i, r.MaxTokens)
		}
	}
}

// What a request asks of the model follows the model table: the output
// limit lowered to what the model may write, thinking for a model that
// thinks, reasoning effort for one that takes it, neither for others.
func TestRequestsFollowTheModelTable(t *testing.T) {
	for _, tc := range []struct {
		name, model string
		env         map[string]string
		want        model.Request
	}{
		{"the output limit lowered to the model's", "openai:gpt-4o", map[string]string{"CORRAL_MAX_TOKENS": "50000"},
			model.Request{MaxTokens: 16384}},
		{"an unknown model: the limit as set", "openai:local", map[string]string{"CORRAL_MAX_TOKENS": "50000"},
			model.Request{MaxTokens: 50000}},
		{"thinking for a model that thinks", "anthropic:claude-sonnet-4-5", map[string]string{"CORRAL_THINKING_BUDGET": "4000"},
			model.Request{MaxTokens: 8192, Thinking: 4000}},
		{"thinking made room for", "anthropic:claude-3-7-sonnet", map[string]string{"CORRAL_THINKING_BUDGET": "60000", "CORRAL_MAX_TOKENS": "20000"},
			model.Request{MaxTokens: 16000, Thinking: 48000}},
		{"no thinking for one that does not", "anthropic:claude-3-5-haiku", map[string]string{"CORRAL_THINKING_BUDGET": "4000"},
			model.Request{MaxTokens: 8192}},
		{"reasoning effort for a reasoning model", "openai:o3", map[string]string{"CORRAL_REASONING_EFFORT": "high", "CORRAL_THINKING_BUDGET": "4000"},
			model.Request{MaxTokens: 8192, ReasoningEffort: "high"}},
		{"none for one without", "openai:gpt-4.1", map[string]string{"CORRAL_REASONING_EFFORT": "high"},
			model.Request{MaxTokens: 8192}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := LoadConfig(func(k string) string {
				if v, ok := tc.env[k]; ok {
					return v
				}
				return map[string]string{"CORRAL_CALL_SIGNING_KEY": testCallKey}[k]
			})
			if err != nil {
				t.Fatal(err)
			}
			var got model.Request
			(&Service{cfg: cfg}).shape(&got, tc.model)
			if got.MaxTokens != tc.want.MaxTokens || got.Thinking != tc.want.Thinking || got.ReasoningEffort != tc.want.ReasoningEffort {
				t.Errorf("max_tokens %d, thinking %d, reasoning effort %q; want %d, %d, %q",
					got.MaxTokens, got.Thinking, got.ReasoningEffort, tc.want.MaxTokens, tc.want.Thinking, tc.want.ReasoningEffort)
			}
		})
	}
}

func TestContextSettings(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"CORRAL_COMPACT_THRESHOLD": "1.5"}, "CORRAL_COMPACT_THRESHOLD"},
		{map[string]string{"CORRAL_COMPACT_THRESHOLD": "NaN"}, "CORRAL_COMPACT_THRESHOLD"},
		{map[string]string{"CORRAL_COMPACT_KEEP_RESULTS": "0"}, "CORRAL_COMPACT_KEEP_RESULTS"},
		{map[string]string{"CORRAL_TOOL_OUTPUT_CAP": "-1"}, "CORRAL_TOOL_OUTPUT_CAP"},
		{map[string]string{"CORRAL_THINKING_BUDGET": "100"}, "CORRAL_THINKING_BUDGET"},
		{map[string]string{"CORRAL_REASONING_EFFORT": "max"}, "CORRAL_REASONING_EFFORT"},
		{map[string]string{"CORRAL_MODELS": "/nonexistent/models.yaml"}, "CORRAL_MODELS"},
	} {
		_, err := LoadConfig(func(k string) string {
			if v, ok := tc.env[k]; ok {
				return v
			}
			return map[string]string{"CORRAL_CALL_SIGNING_KEY": testCallKey}[k]
		})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: LoadConfig = %v, want an error naming %s", tc.env, err, tc.want)
		}
	}
	cfg, err := LoadConfig(func(k string) string { return map[string]string{"CORRAL_CALL_SIGNING_KEY": testCallKey}[k] })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.CompactThreshold != 0.75 || cfg.CompactKeepResults != 3 || cfg.ToolOutputCap != 32<<10 || cfg.ThinkingBudget != 0 ||
		cfg.Models.Lookup("openai:local").ContextWindow != modelinfo.Default().Lookup("openai:local").ContextWindow {
		t.Errorf("defaults: %+v", cfg)
	}
}

// A stop recorded while the model writes a summary ends the session there:
// the compaction is recorded, and the model is not asked for a turn more,
// as after a stop recorded while it answers a turn.
func TestStopDuringASummary(t *testing.T) {
	const window = 16000
	asking, release := make(chan struct{}), make(chan struct{})
	var askedOnce, freedOnce sync.Once
	_, _, js := natstest.Run(t)
	steps := stepsModel(1000)
	fake := modeltest.New(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
		if n := len(c.Messages); n > 0 && strings.Contains(c.Messages[n-1].Text, "[Corral] This conversation is about to be compacted") {
			askedOnce.Do(func() { close(asking) })
			<-release
		}
		return steps(c)
	})
	fake.SetContextWindow(window)
	runHarnessWith(t, js, fake, map[string]string{
		"CORRAL_MODELS":               modelsFile(t, fmt.Sprintf("%q: {context_window: %d}\n", "openai:m", window)),
		"CORRAL_MAX_TOKENS":           "1024",
		"CORRAL_COMPACT_KEEP_RESULTS": "100", // nothing cleared: a summary at once
		"CORRAL_PROMPT_CACHE":         "off",
	})
	free := func() { freedOnce.Do(func() { close(release) }) }
	t.Cleanup(free) // before the harness stops: its step waits for the model
	startTools(t, js, output(strings.Repeat("a line of the build's output\n", 300)))
	session := uuid.Must(uuid.NewV7())
	request(t, js, session, "make every step")
	select {
	case <-asking:
	case <-time.After(20 * time.Second):
		t.Fatal("the model was never asked for a summary")
	}
	stopRecorded(t, js, session, "enough")
	free()
	idle(t, js)
	reqs := fake.Requests()
	last := reqs[len(reqs)-1]
	if n := len(last.Messages); n == 0 || !strings.Contains(last.Messages[n-1].Text, "[Corral] This conversation is about to be compacted") {
		t.Errorf("the model was asked for a turn after the stop (%d requests, the last not the summary's)", len(reqs))
	}
	if c := ofType[*event.ContextCompacted](logOf(t, js, "acme", session)); len(c) != 1 || c[0].Summary == "" {
		t.Errorf("compactions recorded: %+v, want the one with the summary", c)
	}
}

// A summary the model refuses to write (or writes empty) replaces
// nothing: the compaction clears old results alone, and what the request
// cost counts.
func TestRefusedSummaryKeepsTheConversation(t *testing.T) {
	const window, steps = 16000, 12
	_, _, js := natstest.Run(t)
	steady := stepsModel(steps)
	fake := modeltest.New(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
		if n := len(c.Messages); n > 0 && strings.Contains(c.Messages[n-1].Text, "[Corral] This conversation is about to be compacted") {
			return modeltest.Turn{Refusal: "I won't summarise."}, nil
		}
		return steady(c)
	})
	runHarnessWith(t, js, fake, map[string]string{
		"CORRAL_MODELS":       modelsFile(t, fmt.Sprintf("%q: {context_window: %d}\n", "openai:m", window)),
		"CORRAL_MAX_TOKENS":   "1024",
		"CORRAL_PROMPT_CACHE": "off",
	})
	startTools(t, js, output(strings.Repeat("a line of the build's output\n", 300)))
	session := uuid.Must(uuid.NewV7())
	request(t, js, session, "make every step")
	completion(t, js, session)
	var asked int
	for _, c := range ofType[*event.ContextCompacted](logOf(t, js, "acme", session)) {
		if c.Model == "" {
			continue
		}
		asked++
		if c.SummarizedThrough != 0 || c.Summary != "" || c.Usage.InputTokens == 0 {
			t.Errorf("compaction after a refused summary: %+v", c)
		}
	}
	if asked == 0 {
		t.Fatal("no summary was asked for")
	}
	reqs := fake.Requests()
	if last := reqs[len(reqs)-1]; last.Messages[0].Text != "make every step" {
		t.Errorf("the last request starts %q: the older turns went", last.Messages[0].Text)
	}
}
