package model_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"corral.dev/pkg/model"
)

const openAIReply = `{
	"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-test-2025",
	"choices": [{
		"index": 0,
		"message": {
			"role": "assistant",
			"content": "Reading both.",
			"tool_calls": [
				{"id": "call_a", "type": "function", "function": {"name": "Read", "arguments": "{\"file_path\":\"/y\"}"}},
				{"id": "call_b", "type": "function", "function": {"name": "Bash", "arguments": "{\"command\": \"ls"}},
				{"id": "call_c", "type": "function", "function": {"name": "Glob", "arguments": ""}}
			]
		},
		"finish_reason": "tool_calls"
	}],
	"usage": {"prompt_tokens": 50, "completion_tokens": 9, "total_tokens": 59}
}`

func TestOpenAIRequest(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, func(n int, w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, openAIReply)
	})
	c := model.NewOpenAI(model.Config{APIKey: "sk-test", BaseURL: api.URL + "/v1"})
	req := conversation(0)
	// A user message that adds text after its tool results.
	req.Messages[2].Content = append(req.Messages[2].Content, model.Block{Type: model.TextBlock, Text: "and hurry"})
	// An assistant turn with only a tool call, whose arguments were malformed.
	req.Messages = append(req.Messages,
		model.Message{Role: model.Assistant, Content: []model.Block{{Type: model.ToolUseBlock, ID: "id3", Name: "Bash", Input: json.RawMessage(`"{\"command\": \"ls"`)}}},
		model.Message{Role: model.User, Content: []model.Block{{Type: model.ToolResultBlock, ToolUseID: "id3", Content: "invalid arguments", IsError: true}}},
	)
	if _, err := c.Complete(t.Context(), req); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	got := api.requests()[0]
	if got.Path != "/v1/chat/completions" {
		t.Errorf("path = %q, want /v1/chat/completions", got.Path)
	}
	if v := got.Header.Get("authorization"); v != "Bearer sk-test" {
		t.Errorf("authorization = %q, want Bearer sk-test", v)
	}
	equalJSON(t, "body", got.Body, `{
		"model": "claude-test",
		"stream": true,
		"stream_options": {"include_usage": true},
		"messages": [
			{"role": "system", "content": "You are terse."},
			{"role": "user", "content": "list files"},
			{"role": "assistant", "content": "Looking.", "tool_calls": [
				{"id": "id1", "type": "function", "function": {"name": "Bash", "arguments": "{\"command\":\"ls\"}"}},
				{"id": "id2", "type": "function", "function": {"name": "Read", "arguments": "{\"file_path\":\"/x\"}"}}
			]},
			{"role": "tool", "tool_call_id": "id1", "content": "a.go\nb.go"},
			{"role": "tool", "tool_call_id": "id2", "content": "Error: no such file"},
			{"role": "user", "content": "and hurry"},
			{"role": "assistant", "content": null, "tool_calls": [
				{"id": "id3", "type": "function", "function": {"name": "Bash", "arguments": "{\"command\": \"ls"}}
			]},
			{"role": "tool", "tool_call_id": "id3", "content": "Error: invalid arguments"}
		],
		"tools": [
			{"type": "function", "function": {"name": "Bash", "description": "Runs a command.", "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}},
			{"type": "function", "function": {"name": "Read", "description": "Reads a file.", "parameters": {"type": "object"}}}
		]
	}`)
}

func TestOpenAIResponse(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, func(n int, w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, openAIReply)
	})
	c := model.NewOpenAI(model.Config{BaseURL: api.URL})
	got, err := c.Complete(t.Context(), conversation(256))
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	want := model.Response{
		Content: []model.Block{
			{Type: model.TextBlock, Text: "Reading both."},
			{Type: model.ToolUseBlock, ID: "call_a", Name: "Read", Input: json.RawMessage(`{"file_path":"/y"}`)},
			// Malformed arguments are kept, as a JSON string.
			{Type: model.ToolUseBlock, ID: "call_b", Name: "Bash", Input: json.RawMessage(`"{\"command\": \"ls"`)},
			{Type: model.ToolUseBlock, ID: "call_c", Name: "Glob", Input: json.RawMessage(`{}`)},
		},
		StopReason: "tool_calls",
		Usage:      model.Usage{InputTokens: 50, OutputTokens: 9},
		Model:      "gpt-test-2025",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("response:\ngot  %+v\nwant %+v", got, want)
	}
	r := api.requests()[0]
	if v, ok := r.Header["Authorization"]; ok {
		t.Errorf("authorization sent without a key: %q", v)
	}
	var body map[string]any
	if err := json.Unmarshal(r.Body, &body); err != nil || body["max_completion_tokens"] != 256.0 || body["max_tokens"] != nil {
		t.Errorf("body %s (%v): want max_completion_tokens 256 and no max_tokens", r.Body, err)
	}
}

func TestOpenAIOmitsMaxTokens(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, func(n int, w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, openAIReply)
	})
	c := model.NewOpenAI(model.Config{BaseURL: api.URL})
	if _, err := c.Complete(t.Context(), conversation(0)); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	var body map[string]any
	if err := json.Unmarshal(api.requests()[0].Body, &body); err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{"max_tokens", "max_completion_tokens"} {
		if v, ok := body[field]; ok {
			t.Errorf("%s = %v, want it absent", field, v)
		}
	}
}

func TestOpenAIBaseURL(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, func(n int, w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, openAIReply)
	})
	tests := []struct {
		base, wantPath string
	}{
		{api.URL, "/v1/chat/completions"},
		{api.URL + "/", "/v1/chat/completions"},
		{api.URL + "/v1", "/v1/chat/completions"},
		{api.URL + "/v1/", "/v1/chat/completions"},
		{api.URL + "/api/v1", "/api/v1/chat/completions"},
		{api.URL + "/v1beta/openai/", "/v1beta/openai/chat/completions"},
	}
	for _, tc := range tests {
		c := model.NewOpenAI(model.Config{BaseURL: tc.base})
		if _, err := c.Complete(t.Context(), conversation(0)); err != nil {
			t.Fatalf("base %s: %v", tc.base, err)
		}
		reqs := api.requests()
		if got := reqs[len(reqs)-1].Path; got != tc.wantPath {
			t.Errorf("base %s: path = %q, want %q", tc.base, got, tc.wantPath)
		}
	}
}

func TestOpenAINoChoices(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, func(n int, w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, `{"choices": []}`)
	})
	c := model.NewOpenAI(model.Config{BaseURL: api.URL})
	if _, err := c.Complete(t.Context(), conversation(0)); err == nil {
		t.Error("Complete succeeded, want an error for a response without choices")
	}
}

// A request with a cache key carries it as prompt_cache_key, within the
// API's 64 characters however long the key.
func TestOpenAIPromptCacheKey(t *testing.T) {
	for _, key := range []string{"acme.01a21400-0000-7000-8000-000000000001", strings.Repeat("t", 63) + ".01a21400-0000-7000-8000-000000000001"} {
		var got map[string]any
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_ = json.NewDecoder(r.Body).Decode(&got)
			_, _ = io.WriteString(w, `{"model":"m","choices":[{"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":2000,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":1920}}}`)
		}))
		c := model.NewOpenAI(model.Config{BaseURL: srv.URL})
		resp, err := c.Complete(context.Background(), model.Request{Model: "m", Messages: []model.Message{{Role: model.User, Content: []model.Block{{Type: model.TextBlock, Text: "hi"}}}}, CacheKey: key})
		srv.Close()
		if err != nil {
			t.Fatal(err)
		}
		sent, _ := got["prompt_cache_key"].(string)
		if sent == "" || len(sent) > 64 || (len(key) <= 64 && sent != key) {
			t.Errorf("key %q sent as %q", key, sent)
		}
		if resp.Usage.CacheReadTokens != 1920 || resp.Usage.InputTokens != 2000 {
			t.Errorf("usage %+v, want 1920 of 2000 input tokens cached", resp.Usage)
		}
	}
}
