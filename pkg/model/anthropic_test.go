package model_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"testing"

	"corral.dev/pkg/model"
	"corral.dev/pkg/tool"
)

// conversation is a request with every kind of block: a user prompt, an
// assistant turn with text and two tool calls, and their results, one failed.
func conversation(maxTokens int) model.Request {
	return model.Request{
		Model:  "claude-test",
		System: "You are terse.",
		Messages: []model.Message{
			{Role: model.User, Content: []model.Block{{Type: model.TextBlock, Text: "list files"}}},
			{Role: model.Assistant, Content: []model.Block{
				{Type: model.TextBlock, Text: "Looking."},
				{Type: model.ToolUseBlock, ID: "id1", Name: "Bash", Input: json.RawMessage(`{"command":"ls"}`)},
				{Type: model.ToolUseBlock, ID: "id2", Name: "Read", Input: json.RawMessage(`{"file_path":"/x"}`)},
			}},
			{Role: model.User, Content: []model.Block{
				{Type: model.ToolResultBlock, ToolUseID: "id1", Content: "a.go\nb.go"},
				{Type: model.ToolResultBlock, ToolUseID: "id2", Content: "no such file", IsError: true},
			}},
		},
		Tools: []tool.Spec{
			{Name: "Bash", Description: "Runs a command.", InputSchema: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}}}`)},
			{Name: "Read", Description: "Reads a file.", InputSchema: json.RawMessage(`{"type":"object"}`)},
		},
		MaxTokens: maxTokens,
	}
}

const anthropicReply = `{
	"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test-20250101",
	"content": [
		{"type": "thinking", "thinking": "hmm", "signature": "x"},
		{"type": "text", "text": "Reading it."},
		{"type": "tool_use", "id": "toolu_9", "name": "Read", "input": {"file_path": "/y"}}
	],
	"stop_reason": "tool_use", "stop_sequence": null,
	"usage": {"input_tokens": 100, "output_tokens": 20, "cache_creation_input_tokens": 5, "cache_read_input_tokens": 7}
}`

func TestAnthropicRequest(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, func(n int, w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, anthropicReply)
	})
	c := model.NewAnthropic(model.Config{APIKey: "sk-ant-test", BaseURL: api.URL})
	if _, err := c.Complete(t.Context(), conversation(0)); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	reqs := api.requests()
	if len(reqs) != 1 {
		t.Fatalf("got %d requests, want 1", len(reqs))
	}
	got := reqs[0]
	if got.Path != "/v1/messages" {
		t.Errorf("path = %q, want /v1/messages", got.Path)
	}
	for name, want := range map[string]string{
		"x-api-key":         "sk-ant-test",
		"anthropic-version": "2023-06-01",
		"content-type":      "application/json",
		"authorization":     "",
	} {
		if v := got.Header.Get(name); v != want {
			t.Errorf("header %s = %q, want %q", name, v, want)
		}
	}
	equalJSON(t, "body", got.Body, `{
		"model": "claude-test",
		"max_tokens": 4096,
		"stream": true,
		"system": "You are terse.",
		"messages": [
			{"role": "user", "content": [{"type": "text", "text": "list files"}]},
			{"role": "assistant", "content": [
				{"type": "text", "text": "Looking."},
				{"type": "tool_use", "id": "id1", "name": "Bash", "input": {"command": "ls"}},
				{"type": "tool_use", "id": "id2", "name": "Read", "input": {"file_path": "/x"}}
			]},
			{"role": "user", "content": [
				{"type": "tool_result", "tool_use_id": "id1", "content": "a.go\nb.go"},
				{"type": "tool_result", "tool_use_id": "id2", "content": "no such file", "is_error": true}
			]}
		],
		"tools": [
			{"name": "Bash", "description": "Runs a command.", "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}},
			{"name": "Read", "description": "Reads a file.", "input_schema": {"type": "object"}}
		]
	}`)
}

func TestAnthropicResponse(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, func(n int, w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, anthropicReply)
	})
	c := model.NewAnthropic(model.Config{APIKey: "k", BaseURL: api.URL})
	got, err := c.Complete(t.Context(), conversation(100))
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	want := model.Response{
		Content: []model.Block{
			{Type: model.ThinkingBlock, Thinking: "hmm", Signature: "x"},
			{Type: model.TextBlock, Text: "Reading it."},
			{Type: model.ToolUseBlock, ID: "toolu_9", Name: "Read", Input: json.RawMessage(`{"file_path": "/y"}`)},
		},
		StopReason: "tool_use",
		Usage:      model.Usage{InputTokens: 112, OutputTokens: 20, CacheReadTokens: 7, CacheWriteTokens: 5},
		Model:      "claude-test-20250101",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("response:\ngot  %+v\nwant %+v", got, want)
	}
	var body struct {
		MaxTokens int `json:"max_tokens"`
	}
	if err := json.Unmarshal(api.requests()[0].Body, &body); err != nil || body.MaxTokens != 100 {
		t.Errorf("max_tokens = %d (%v), want 100", body.MaxTokens, err)
	}
}

func TestAnthropicBaseURL(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, func(n int, w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, anthropicReply)
	})
	for _, base := range []string{api.URL, api.URL + "/", api.URL + "/v1", api.URL + "/v1/"} {
		c := model.NewAnthropic(model.Config{APIKey: "k", BaseURL: base})
		if _, err := c.Complete(t.Context(), conversation(0)); err != nil {
			t.Errorf("base %s: %v", base, err)
		}
	}
	for i, r := range api.requests() {
		if r.Path != "/v1/messages" {
			t.Errorf("request %d: path = %q, want /v1/messages", i, r.Path)
		}
	}
}

func TestAnthropicRejectsUnknownBlock(t *testing.T) {
	t.Parallel()
	c := model.NewAnthropic(model.Config{APIKey: "k", BaseURL: "http://127.0.0.1:1"})
	req := model.Request{Model: "m", Messages: []model.Message{{Role: model.User, Content: []model.Block{{Type: "image"}}}}}
	_, err := c.Complete(t.Context(), req)
	if !errors.Is(err, model.ErrPermanent) {
		t.Errorf("err = %v, want one matching ErrPermanent", err)
	}
}
