package modeltest_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"corral.dev/pkg/modeltest"
)

// post sends body to the server's path with the headers given as name,
// value pairs, and returns the status, headers and decoded body.
func post(t *testing.T, url, body string, headers ...string) (int, http.Header, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("content-type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("post %s: %v", url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("decode response %s: %v", data, err)
	}
	return resp.StatusCode, resp.Header, out
}

// get follows a path of object keys and array indexes through v.
func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			a, _ := v.([]any)
			if k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}

const anthropicTurn2 = `{
	"model": "claude-x", "max_tokens": 100,
	"system": [{"type": "text", "text": "Be brief."}],
	"tools": [{"name": "Bash", "input_schema": {"type": "object"}}],
	"messages": [
		{"role": "user", "content": "hi"},
		{"role": "assistant", "content": [{"type": "text", "text": "Looking."}, {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}]},
		{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "a.go"}], "is_error": true}]}
	]
}`

func TestAnthropic(t *testing.T) {
	t.Parallel()
	srv := modeltest.New(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
		return modeltest.Turn{Text: "Next.", Calls: []modeltest.Call{{Name: "Bash", Input: map[string]string{"command": "pwd"}}, {Name: "Bash"}}}, nil
	})
	status, header, body := post(t, srv.URL()+"/v1/messages", anthropicTurn2, "x-api-key", "k1", "anthropic-version", "2023-06-01")
	if status != http.StatusOK {
		t.Fatalf("status = %d, body %v", status, body)
	}
	if header.Get("request-id") == "" {
		t.Error("no request-id header")
	}
	want := modeltest.Conversation{
		Provider: "anthropic", Model: "claude-x", System: "Be brief.", APIKey: "k1", MaxTokens: 100, Tools: []string{"Bash"},
		Messages: []modeltest.Msg{
			{Role: "user", Text: "hi"},
			{Role: "assistant", Text: "Looking.", Calls: []modeltest.Call{{ID: "toolu_1", Name: "Bash", Input: json.RawMessage(`{"command": "ls"}`)}}},
			{Role: "user", Results: []modeltest.Result{{CallID: "toolu_1", Content: "a.go", IsError: true}}},
		},
		Body: []byte(anthropicTurn2),
	}
	reqs := srv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("Requests() has %d, want 1", len(reqs))
	}
	if reqs[0].Received.IsZero() {
		t.Error("the request's Received is not set")
	}
	reqs[0].Received = time.Time{}
	if !reflect.DeepEqual(reqs[0], want) {
		t.Errorf("conversation:\ngot  %+v\nwant %+v", reqs[0], want)
	}
	if got := modeltest.Turns(reqs[0]); got != 1 {
		t.Errorf("Turns = %d, want 1", got)
	}
	for path, want := range map[string]any{
		"type":            "message",
		"model":           "claude-x",
		"stop_reason":     "tool_use",
		"content.0.type":  "text",
		"content.0.text":  "Next.",
		"content.1.type":  "tool_use",
		"content.1.name":  "Bash",
		"content.1.input": map[string]any{"command": "pwd"},
		"content.2.input": map[string]any{},
	} {
		if got := get(body, splitPath(path)...); !reflect.DeepEqual(got, want) {
			t.Errorf("%s = %#v, want %#v", path, got, want)
		}
	}
	id1, _ := get(body, "content", 1, "id").(string)
	id2, _ := get(body, "content", 2, "id").(string)
	if !strings.HasPrefix(id1, "toolu_") || !strings.HasPrefix(id2, "toolu_") || id1 == id2 {
		t.Errorf("tool_use ids %q, %q: want distinct toolu_ ids", id1, id2)
	}
	// The prompt's pieces, not the request's other fields, at four bytes
	// a token; with no breakpoint, nothing cached.
	if in, _ := get(body, "usage", "input_tokens").(float64); in < 1 || in >= float64(len(anthropicTurn2)/4) {
		t.Errorf("input_tokens = %v, want some, fewer than the body's %d", in, len(anthropicTurn2)/4)
	}
	if r, _ := get(body, "usage", "cache_read_input_tokens").(float64); r != 0 {
		t.Errorf("cache_read_input_tokens = %v with no breakpoint", r)
	}
	if out, _ := get(body, "usage", "output_tokens").(float64); out < 1 {
		t.Errorf("output_tokens = %v, want at least 1", out)
	}
}

const openAITurn2 = `{
	"model": "gpt-x",
	"messages": [
		{"role": "system", "content": "Be brief."},
		{"role": "user", "content": [{"type": "text", "text": "hi"}]},
		{"role": "assistant", "content": null, "tool_calls": [
			{"id": "call_1", "type": "function", "function": {"name": "Bash", "arguments": "{\"command\":\"ls\"}"}},
			{"id": "call_2", "type": "function", "function": {"name": "Bash", "arguments": "{oops"}}
		]},
		{"role": "tool", "tool_call_id": "call_1", "content": "a.go"},
		{"role": "tool", "tool_call_id": "call_2", "content": "Error: invalid arguments"}
	],
	"tools": [{"type": "function", "function": {"name": "Bash", "parameters": {"type": "object"}}}],
	"max_completion_tokens": 64
}`

func TestOpenAI(t *testing.T) {
	t.Parallel()
	srv := modeltest.New(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
		want := []modeltest.Result{{CallID: "call_1", Content: "a.go"}, {CallID: "call_2", Content: "Error: invalid arguments", IsError: true}}
		if got := modeltest.Results(c); !reflect.DeepEqual(got, want) {
			return modeltest.Turn{}, errors.New("unexpected results")
		}
		if modeltest.Turns(c) == 1 {
			return modeltest.Turn{Calls: []modeltest.Call{{ID: "call_mine", Name: "Read", Input: `{"file_path":`}}}, nil
		}
		return modeltest.Turn{Text: "done"}, nil
	})
	status, _, body := post(t, srv.URL()+"/v1/chat/completions", openAITurn2, "authorization", "Bearer k2")
	if status != http.StatusOK {
		t.Fatalf("status = %d, body %v", status, body)
	}
	for path, want := range map[string]any{
		"object":                                            "chat.completion",
		"model":                                             "gpt-x",
		"choices.0.finish_reason":                           "tool_calls",
		"choices.0.message.role":                            "assistant",
		"choices.0.message.content":                         nil,
		"choices.0.message.tool_calls.0.id":                 "call_mine",
		"choices.0.message.tool_calls.0.type":               "function",
		"choices.0.message.tool_calls.0.function.name":      "Read",
		"choices.0.message.tool_calls.0.function.arguments": `{"file_path":`,
	} {
		if got := get(body, splitPath(path)...); !reflect.DeepEqual(got, want) {
			t.Errorf("%s = %#v, want %#v", path, got, want)
		}
	}
	c := srv.Requests()[0]
	if c.APIKey != "k2" || c.System != "Be brief." || c.MaxTokens != 64 || c.Messages[0].Text != "hi" {
		t.Errorf("conversation = %+v", c)
	}
	if in := c.Messages[1].Calls[1].Input; in != "{oops" {
		t.Errorf("malformed arguments decoded as %#v, want the raw string", in)
	}
}

func TestFailNext(t *testing.T) {
	t.Parallel()
	srv := modeltest.New(t, nil)
	srv.FailNext(529, "0", 2)
	for i, want := range []int{529, 529, 200} {
		status, header, body := post(t, srv.URL()+"/v1/messages", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`, "anthropic-version", "2023-06-01")
		if status != want {
			t.Fatalf("request %d: status = %d, want %d", i, status, want)
		}
		if status == 529 && (header.Get("retry-after") != "0" || get(body, "error", "type") != "overloaded_error") {
			t.Errorf("request %d: retry-after %q, body %v", i, header.Get("retry-after"), body)
		}
	}
	srv.FailNext(429, "", 1)
	status, header, body := post(t, srv.URL()+"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	if status != 429 || header.Get("retry-after") != "" || get(body, "error", "code") != "rate_limit_exceeded" {
		t.Errorf("status %d, retry-after %q, body %v", status, header.Get("retry-after"), body)
	}
	if got := len(srv.Requests()); got != 4 {
		t.Errorf("Requests() has %d, want 4", got)
	}
}

func TestRejects(t *testing.T) {
	t.Parallel()
	srv := modeltest.New(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
		return modeltest.Turn{}, errors.New("script says no")
	})
	anthropic := []string{"anthropic-version", "2023-06-01"}
	tests := []struct {
		name, path, body string
		headers          []string
		wantStatus       int
		wantMessage      string
	}{
		{"script error", "/v1/messages", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`, anthropic, 500, "script says no"},
		{"no version", "/v1/messages", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`, nil, 400, "anthropic-version: header is required"},
		{"no max_tokens", "/v1/messages", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, anthropic, 400, "max_tokens: must be at least 1"},
		{"unanswered tool_use", "/v1/messages", `{"model":"m","max_tokens":1,"messages":[
			{"role":"user","content":"hi"},
			{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{}}]},
			{"role":"user","content":"and?"}]}`, anthropic, 400, "messages.1: tool call t1 must have exactly one result right after it, has 0"},
		{"stray tool message", "/v1/chat/completions", `{"model":"m","messages":[
			{"role":"user","content":"hi"},
			{"role":"tool","tool_call_id":"call_1","content":"x"}]}`, nil, 400, "messages.1: tool results must directly follow the assistant message with the tool calls"},
		{"bad json", "/v1/chat/completions", `{"model":`, nil, 400, "decode request: unexpected end of JSON input"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			status, _, body := post(t, srv.URL()+tc.path, tc.body, tc.headers...)
			if status != tc.wantStatus || get(body, "error", "message") != tc.wantMessage {
				t.Errorf("status %d, body %v; want %d with message %q", status, body, tc.wantStatus, tc.wantMessage)
			}
		})
	}
}

func TestResultsAndTurns(t *testing.T) {
	t.Parallel()
	c := modeltest.Conversation{Messages: []modeltest.Msg{
		{Role: "user", Text: "go"},
		{Role: "assistant", Calls: []modeltest.Call{{ID: "a"}}},
		{Role: "tool", Results: []modeltest.Result{{CallID: "a", Content: "old"}}},
		{Role: "assistant", Calls: []modeltest.Call{{ID: "b"}, {ID: "c"}}},
		{Role: "tool", Results: []modeltest.Result{{CallID: "b", Content: "1"}}},
		{Role: "tool", Results: []modeltest.Result{{CallID: "c", Content: "2"}}},
	}}
	want := []modeltest.Result{{CallID: "b", Content: "1"}, {CallID: "c", Content: "2"}}
	if got := modeltest.Results(c); !reflect.DeepEqual(got, want) {
		t.Errorf("Results = %+v, want %+v", got, want)
	}
	if got := modeltest.Turns(c); got != 2 {
		t.Errorf("Turns = %d, want 2", got)
	}
	if got := modeltest.Results(modeltest.Conversation{}); got != nil {
		t.Errorf("Results of nothing = %+v, want nil", got)
	}
}

// splitPath turns "a.0.b" into "a", 0, "b".
func splitPath(s string) []any {
	var out []any
	for _, p := range strings.Split(s, ".") {
		if n, err := strconv.Atoi(p); err == nil {
			out = append(out, n)
		} else {
			out = append(out, p)
		}
	}
	return out
}
