package model_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"corral.dev/pkg/model"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/tool"
)

// lastBody decodes the body of the server's last request.
func lastBody(t *testing.T, srv *modeltest.Server) map[string]any {
	t.Helper()
	reqs := srv.Requests()
	var body map[string]any
	if err := json.Unmarshal(reqs[len(reqs)-1].Body, &body); err != nil {
		t.Fatal(err)
	}
	return body
}

// Thinking blocks come back signed, go back byte for byte with the turn's
// tool calls (the fake checks the signature), and a turn that alters or
// drops them is refused as the API refuses it.
func TestThinkingRoundTrip(t *testing.T) {
	t.Parallel()
	const thought = "Two calls: ls, then read.\n\t«quotes» \"and\" <tags> & \\ escapes \u2028."
	srv := modeltest.New(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
		if modeltest.Turns(c) == 0 {
			return modeltest.Turn{Thinking: thought, Calls: []modeltest.Call{{Name: tool.Bash, Input: map[string]string{"command": "ls"}}}}, nil
		}
		return modeltest.Turn{Text: "done"}, nil
	})
	c := model.NewAnthropic(model.Config{APIKey: "test-key", BaseURL: srv.URL()})
	req := model.Request{
		Model:     "claude-x",
		Messages:  []model.Message{{Role: model.User, Content: []model.Block{{Type: model.TextBlock, Text: "go"}}}},
		MaxTokens: 1000,
		Thinking:  2000,
		CacheKey:  "s1",
	}
	first, err := c.Complete(t.Context(), req)
	if err != nil {
		t.Fatalf("first turn: %v", err)
	}
	body := lastBody(t, srv)
	if got, want := body["thinking"], map[string]any{"type": "enabled", "budget_tokens": 2000.0}; !equalAny(got, want) {
		t.Errorf("thinking = %v, want %v", got, want)
	}
	if body["max_tokens"] != 3000.0 {
		t.Errorf("max_tokens = %v, want the budget plus MaxTokens, 3000", body["max_tokens"])
	}
	if len(first.Content) != 2 || first.Content[0].Type != model.ThinkingBlock || first.Content[0].Thinking != thought || first.Content[0].Signature == "" {
		t.Fatalf("first turn content = %+v, want the thinking block, then the call", first.Content)
	}
	use := first.ToolUses()[0]
	next := func(assistant []model.Block) model.Request {
		r := req
		r.Messages = append(append([]model.Message(nil), req.Messages...),
			model.Message{Role: model.Assistant, Content: assistant},
			model.Message{Role: model.User, Content: []model.Block{{Type: model.ToolResultBlock, ToolUseID: use.ID, Content: "a.go"}}})
		return r
	}
	if _, err := c.Complete(t.Context(), next(first.Content)); err != nil {
		t.Fatalf("second turn, thinking sent back: %v", err)
	}
	if got := srv.Requests()[1].Messages[1].Thinking; got != thought {
		t.Errorf("thinking sent back as %q, want %q", got, thought)
	}

	altered := append([]model.Block(nil), first.Content...)
	altered[0].Thinking += " "
	for name, tc := range map[string]struct {
		content []model.Block
		want    string
	}{
		"altered": {altered, "Invalid `signature` in `thinking` block"},
		"dropped": {first.Content[1:], "Expected `thinking` or `redacted_thinking`, but found `tool_use`"},
	} {
		_, err := c.Complete(t.Context(), next(tc.content))
		apiErr, ok := errors.AsType[*model.APIError](err)
		if !ok || apiErr.Status != 400 || !errors.Is(err, model.ErrPermanent) || !strings.Contains(apiErr.Message, tc.want) {
			t.Errorf("%s thinking: err = %v, want a 400 saying %q", name, err, tc.want)
		}
	}

	// A budget under the API's minimum is raised to it.
	low := req
	low.Thinking = 100
	if _, err := c.Complete(t.Context(), low); err != nil {
		t.Fatalf("low budget: %v", err)
	}
	if got := srv.Requests()[len(srv.Requests())-1].Thinking; got != 1024 {
		t.Errorf("budget sent = %d, want 1024", got)
	}
}

// A cached request never puts a breakpoint on a thinking block, which the
// API refuses: an assistant message ending with one has none, or has it
// on its last other block.
func TestBreakpointsSkipThinking(t *testing.T) {
	t.Parallel()
	srv := modeltest.New(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
		return modeltest.Turn{Thinking: "hm", StopReason: "max_tokens"}, nil
	})
	c := model.NewAnthropic(model.Config{APIKey: "test-key", BaseURL: srv.URL()})
	req := model.Request{
		Model:     "claude-x",
		Messages:  []model.Message{{Role: model.User, Content: []model.Block{{Type: model.TextBlock, Text: "go"}}}},
		Thinking:  1024,
		CacheKey:  "s1",
		MaxTokens: 10,
	}
	first, err := c.Complete(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if first.StopReason != "max_tokens" || len(first.Content) != 1 || first.Content[0].Type != model.ThinkingBlock {
		t.Fatalf("first = %+v, want only a thinking block", first)
	}
	for _, content := range [][]model.Block{
		first.Content,
		{{Type: model.TextBlock, Text: "partial"}, first.Content[0], {Type: model.RedactedThinkingBlock, Data: "opaque"}},
	} {
		r := req
		r.Messages = append(append([]model.Message(nil), req.Messages...), model.Message{Role: model.Assistant, Content: content})
		if _, err := c.Complete(t.Context(), r); err != nil {
			t.Errorf("assistant %+v: %v", content, err)
		}
	}
	last := srv.Requests()[len(srv.Requests())-1].Body
	if !bytes.Contains(last, []byte(`{"type":"text","text":"partial","cache_control":{"type":"ephemeral"}}`)) {
		t.Errorf("the breakpoint is not on the text before the thinking blocks: %s", last)
	}
	if !bytes.Contains(last, []byte(`{"type":"redacted_thinking","data":"opaque"}`)) {
		t.Errorf("redacted thinking not sent back as it came: %s", last)
	}
}

// OpenAI takes max_completion_tokens, which its reasoning models require;
// the older max_tokens is for compatible servers that need it.
func TestOpenAIMaxTokensField(t *testing.T) {
	t.Parallel()
	srv := modeltest.New(t, nil)
	req := conversation(500)
	req.Model = "gpt-5-mini"
	modern := model.NewOpenAI(model.Config{BaseURL: srv.URL()})
	if _, err := modern.Complete(t.Context(), req); err != nil {
		t.Fatalf("max_completion_tokens: %v", err)
	}
	if body := lastBody(t, srv); body["max_completion_tokens"] != 500.0 || body["max_tokens"] != nil {
		t.Errorf("body %v: want max_completion_tokens 500 alone", body)
	}

	legacy := model.NewOpenAI(model.Config{BaseURL: srv.URL(), MaxTokensField: model.MaxTokensLegacy})
	_, err := legacy.Complete(t.Context(), req)
	if apiErr, ok := errors.AsType[*model.APIError](err); !ok || !errors.Is(err, model.ErrPermanent) || !strings.Contains(apiErr.Message, "Use 'max_completion_tokens' instead") {
		t.Errorf("max_tokens to gpt-5-mini: err = %v, want the API's 400", err)
	}
	req.Model = "llama3.1:8b"
	if _, err := legacy.Complete(t.Context(), req); err != nil {
		t.Fatalf("max_tokens to a compatible server: %v", err)
	}
	if body := lastBody(t, srv); body["max_tokens"] != 500.0 || body["max_completion_tokens"] != nil {
		t.Errorf("body %v: want max_tokens 500 alone", body)
	}
}

// ReasoningEffort goes to OpenAI as reasoning_effort.
func TestOpenAIReasoningEffort(t *testing.T) {
	t.Parallel()
	srv := modeltest.New(t, nil)
	c := model.NewOpenAI(model.Config{BaseURL: srv.URL()})
	req := conversation(0)
	req.Model, req.ReasoningEffort = "o3", "high"
	if _, err := c.Complete(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	req.ReasoningEffort = ""
	if _, err := c.Complete(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	reqs := srv.Requests()
	if reqs[0].ReasoningEffort != "high" || reqs[1].ReasoningEffort != "" {
		t.Errorf("reasoning efforts sent: %q, %q; want high, then none", reqs[0].ReasoningEffort, reqs[1].ReasoningEffort)
	}
	if _, ok := lastBody(t, srv)["reasoning_effort"]; ok {
		t.Error("reasoning_effort sent when the request has none")
	}
}

// A refusal is recorded with its stop reason, and shown as text.
func TestRefusal(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		provider    provider
		turn        modeltest.Turn
		wantRefusal string
		wantStop    string
		wantText    string
	}{
		{"openai", providers[1], modeltest.Turn{Refusal: "I can't help with that."}, "I can't help with that.", "stop", "I can't help with that."},
		{"anthropic", providers[0], modeltest.Turn{Refusal: "I won't do that."}, "I won't do that.", "refusal", "I won't do that."},
		{"anthropic bare", providers[0], modeltest.Turn{StopReason: "refusal"}, "The model declined to answer.", "refusal", ""},
		{"anthropic ends", providers[0], modeltest.Turn{Text: "Sure", StopReason: "end_turn"}, "", "end_turn", "Sure"},
	}
	for _, tc := range tests {
		for _, mode := range []string{"streamed", "whole"} {
			t.Run(tc.name+"/"+mode, func(t *testing.T) {
				t.Parallel()
				srv := modeltest.New(t, func(modeltest.Conversation) (modeltest.Turn, error) { return tc.turn, nil })
				cfg := model.Config{APIKey: "test-key", BaseURL: srv.URL()}
				if mode == "whole" {
					cfg.HTTPClient = &http.Client{Transport: unstreamed{}}
				}
				resp, err := tc.provider.new(cfg).Complete(t.Context(), conversation(0))
				if err != nil {
					t.Fatal(err)
				}
				if resp.Refusal != tc.wantRefusal || resp.StopReason != tc.wantStop || resp.Text() != tc.wantText {
					t.Errorf("response = %+v; want refusal %q, stop reason %q, text %q", resp, tc.wantRefusal, tc.wantStop, tc.wantText)
				}
			})
		}
	}
}

// CacheTTL "1h" asks for the longer lifetime: one-hour breakpoints, whose
// writes the usage counts apart, and OpenAI's extended retention.
func TestCacheTTL(t *testing.T) {
	t.Parallel()
	for _, ttl := range []string{"", "1h"} {
		t.Run("anthropic/"+ttl, func(t *testing.T) {
			t.Parallel()
			srv := modeltest.New(t, nil)
			c := model.NewAnthropic(model.Config{APIKey: "test-key", BaseURL: srv.URL()})
			req := conversation(0)
			req.CacheKey, req.CacheTTL = "s1", ttl
			resp, err := c.Complete(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			got := srv.Requests()[0]
			marks := bytes.Count(got.Body, []byte(`"cache_control"`))
			long := bytes.Count(got.Body, []byte(`"cache_control":{"type":"ephemeral","ttl":"1h"}`))
			if marks != 4 || got.CacheTTL != ttl || (ttl == "1h") != (long == marks) || (ttl == "") != (long == 0) {
				t.Errorf("%d breakpoints, %d of an hour, ttl %q: want 4 breakpoints all of ttl %q", marks, long, got.CacheTTL, ttl)
			}
			u := resp.Usage
			if u.CacheWriteTokens == 0 || (ttl == "1h" && u.CacheWriteLongTokens != u.CacheWriteTokens) || (ttl == "" && u.CacheWriteLongTokens != 0) {
				t.Errorf("usage %+v: want what is written counted as written for %q", u, ttl)
			}
		})
	}
	srv := modeltest.New(t, nil)
	c := model.NewOpenAI(model.Config{BaseURL: srv.URL()})
	req := conversation(0)
	req.CacheKey, req.CacheTTL = "s1", "1h"
	if _, err := c.Complete(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	if got := srv.Requests()[0]; got.CacheTTL != "24h" {
		t.Errorf("prompt_cache_retention = %q, want 24h", got.CacheTTL)
	}
}

// A prompt longer than the model's window is refused permanently, with
// the provider's reason.
func TestContextWindow(t *testing.T) {
	t.Parallel()
	for _, p := range providers {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			srv := modeltest.New(t, nil)
			srv.SetContextWindow(20)
			_, err := p.new(model.Config{APIKey: "test-key", BaseURL: srv.URL()}).Complete(t.Context(), conversation(0))
			apiErr, ok := errors.AsType[*model.APIError](err)
			want := map[string]string{"anthropic": "prompt is too long: ", "openai": "This model's maximum context length is 20 tokens"}[p.name]
			if !ok || apiErr.Status != 400 || !errors.Is(err, model.ErrPermanent) || !strings.Contains(apiErr.Message, want) {
				t.Fatalf("err = %v, want a 400 saying %q", err, want)
			}
			if len(srv.Requests()) != 1 {
				t.Errorf("requests = %d, want 1", len(srv.Requests()))
			}
		})
	}
}

func equalAny(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// NoStream asks for whole responses, which decode as the streamed ones,
// and OnDelta hears their content at once.
func TestNoStream(t *testing.T) {
	t.Parallel()
	srv := modeltest.New(t, func(modeltest.Conversation) (modeltest.Turn, error) {
		return modeltest.Turn{Text: "hello", Calls: []modeltest.Call{{ID: "c1", Name: "Bash", Input: map[string]any{"command": "ls"}}}}, nil
	})
	for name, client := range map[string]func(model.Config) model.Client{"anthropic": model.NewAnthropic, "openai": model.NewOpenAI} {
		var streamed model.Response
		for _, noStream := range []bool{false, true} {
			var heard []string
			req := conversation(100)
			req.OnDelta = func(d model.Delta) { heard = append(heard, d.Kind+":"+d.Text) }
			resp, err := client(model.Config{BaseURL: srv.URL(), APIKey: "k", NoStream: noStream}).Complete(t.Context(), req)
			if err != nil {
				t.Fatalf("%s, NoStream %v: %v", name, noStream, err)
			}
			body := lastBody(t, srv)
			if _, ok := body["stream"]; ok == noStream {
				t.Errorf("%s, NoStream %v: body %v", name, noStream, body)
			}
			if !noStream {
				streamed = resp
				continue
			}
			resp.Content[1].ID, streamed.Content[1].ID = "", "" // the fake's IDs differ per request
			if got, want := fmt.Sprint(resp), fmt.Sprint(streamed); got != want {
				t.Errorf("%s: whole %s, streamed %s", name, got, want)
			}
			if want := []string{"text:hello", `tool_use:{"command":"ls"}`}; !slices.Equal(heard, want) {
				t.Errorf("%s: heard %q, want %q", name, heard, want)
			}
		}
	}
}
