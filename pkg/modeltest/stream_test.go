package modeltest_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"corral.dev/pkg/modeltest"
)

// open posts body and returns the response, its body unread.
func open(t *testing.T, url, body string, headers ...string) *http.Response {
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
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// events reads server-sent events: each event's name, if any, and its
// data, decoded unless it is [DONE]. It stops at the end of the stream
// and returns the error that ended it, nil for a clean end.
type sseEvent struct {
	name string
	data map[string]any
	done bool
}

func readEvents(r io.Reader, each func(sseEvent) bool) error {
	sc := bufio.NewScanner(r)
	var ev sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if !each(ev) {
				return nil
			}
			ev = sseEvent{}
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case line == "data: [DONE]":
			ev.done = true
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev.data); err != nil {
				return err
			}
		}
	}
	return sc.Err()
}

func allEvents(t *testing.T, resp *http.Response) ([]sseEvent, error) {
	t.Helper()
	if ct := resp.Header.Get("content-type"); ct != "text/event-stream" {
		t.Fatalf("content-type = %q, want text/event-stream", ct)
	}
	var out []sseEvent
	err := readEvents(resp.Body, func(ev sseEvent) bool {
		out = append(out, ev)
		return true
	})
	return out, err
}

const anthropicStreamRequest = `{"model":"claude-x","max_tokens":2000,"stream":true,"thinking":{"type":"enabled","budget_tokens":1024},
	"messages":[{"role":"user","content":"hi"}]}`

var anthropicHeaders = []string{"x-api-key", "k", "anthropic-version", "2023-06-01"}

// A streamed Messages API reply: the message, each block started,
// streamed in pieces and stopped, the stop reason with the output's usage,
// and message_stop; the pieces add up to the turn.
func TestAnthropicStream(t *testing.T) {
	t.Parallel()
	text := strings.Repeat("Here is a long answer. ", 10)
	srv := modeltest.New(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
		return modeltest.Turn{Thinking: "think", Text: text, Calls: []modeltest.Call{{ID: "toolu_1", Name: "Bash", Input: `{"command": "ls"}`}}}, nil
	})
	events, err := allEvents(t, open(t, srv.URL()+"/v1/messages", anthropicStreamRequest, anthropicHeaders...))
	if err != nil {
		t.Fatalf("read stream: %v", err)
	}
	var names []string
	var gotText, gotInput, signature string
	for _, ev := range events {
		if ev.name != ev.data["type"] {
			t.Errorf("event %q has data of type %v", ev.name, ev.data["type"])
		}
		if len(names) == 0 || names[len(names)-1] != ev.name {
			names = append(names, ev.name)
		}
		d, _ := ev.data["delta"].(map[string]any)
		switch d["type"] {
		case "text_delta":
			gotText += d["text"].(string)
		case "input_json_delta":
			gotInput += d["partial_json"].(string)
		case "signature_delta":
			signature = d["signature"].(string)
		}
	}
	want := []string{"message_start",
		"content_block_start", "content_block_delta", "content_block_stop", "ping", // thinking
		"content_block_start", "content_block_delta", "content_block_stop", // text
		"content_block_start", "content_block_delta", "content_block_stop", // tool_use
		"message_delta", "message_stop"}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("events:\n%v\nwant\n%v", names, want)
	}
	if gotText != text || gotInput != `{"command":"ls"}` || signature == "" {
		t.Errorf("text %q, input %q, signature %q", gotText, gotInput, signature)
	}
	if n := strings.Count(strings.Join(names, " "), "content_block_delta"); n != 3 {
		t.Errorf("delta runs = %d", n)
	}
	last := events[len(events)-2].data
	if get(last, "delta", "stop_reason") != "tool_use" || get(last, "usage", "output_tokens").(float64) < 1 {
		t.Errorf("message_delta = %v", last)
	}
	c := srv.Requests()[0]
	if !c.Stream || c.Thinking != 1024 {
		t.Errorf("conversation: stream %v, thinking %d", c.Stream, c.Thinking)
	}
}

// A streamed Chat Completions reply: chunks of the text and of each
// call, the finish reason, the usage when asked for, and [DONE].
func TestOpenAIStream(t *testing.T) {
	t.Parallel()
	srv := modeltest.New(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
		return modeltest.Turn{Text: "Looking around.", Calls: []modeltest.Call{{ID: "call_1", Name: "Bash", Input: `{"command": "ls"}`}}}, nil
	})
	for _, withUsage := range []bool{true, false} {
		body := `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"hi"}]}`
		if withUsage {
			body = `{"model":"gpt-x","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
		}
		events, err := allEvents(t, open(t, srv.URL()+"/v1/chat/completions", body))
		if err != nil {
			t.Fatalf("read stream: %v", err)
		}
		var text, args, id, name, finish string
		var usage any
		for _, ev := range events[:len(events)-1] {
			if ev.data["object"] != "chat.completion.chunk" || ev.name != "" {
				t.Errorf("chunk %v named %q", ev.data, ev.name)
			}
			if u := ev.data["usage"]; u != nil {
				usage = u
			}
			choice, _ := get(ev.data, "choices", 0).(map[string]any)
			if choice == nil {
				continue
			}
			if f, ok := choice["finish_reason"].(string); ok {
				finish = f
			}
			if s, ok := get(choice, "delta", "content").(string); ok {
				text += s
			}
			if tc, ok := get(choice, "delta", "tool_calls", 0).(map[string]any); ok {
				if s, ok := tc["id"].(string); ok {
					id = s
				}
				if s, ok := get(tc, "function", "name").(string); ok {
					name = s
				}
				args += get(tc, "function", "arguments").(string)
			}
		}
		if !events[len(events)-1].done {
			t.Errorf("last event %v, want [DONE]", events[len(events)-1])
		}
		if text != "Looking around." || id != "call_1" || name != "Bash" || args != `{"command": "ls"}` || finish != "tool_calls" {
			t.Errorf("text %q, call %q %q %q, finish %q", text, id, name, args, finish)
		}
		if withUsage != (usage != nil) {
			t.Errorf("include_usage %v: usage %v", withUsage, usage)
		}
	}
}

// Hold pauses a stream right after its first text delta, which
// OnFirstDelta hears of, until it is closed.
func TestHold(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	first := make(chan struct{}, 10)
	srv := modeltest.New(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
		return modeltest.Turn{Thinking: "first, think", Text: strings.Repeat("word ", 50), Hold: hold, OnFirstDelta: func() { first <- struct{}{} }}, nil
	})
	resp := open(t, srv.URL()+"/v1/messages", anthropicStreamRequest, anthropicHeaders...)
	var seen []string
	err := readEvents(resp.Body, func(ev sseEvent) bool {
		d, _ := ev.data["delta"].(map[string]any)
		seen = append(seen, ev.name)
		return d["type"] != "text_delta"
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-first:
	default:
		t.Fatal("OnFirstDelta was not called by the first text delta")
	}
	if strings.Count(strings.Join(seen, " "), "content_block_delta") != 3 {
		t.Errorf("events before the hold: %v, want the thinking, its signature and the first text delta", seen)
	}
	close(hold)
	rest, err := io.ReadAll(resp.Body)
	if err != nil || !strings.Contains(string(rest), "message_stop") {
		t.Errorf("after the hold: %v, %s", err, rest)
	}
	if len(first) != 0 {
		t.Error("OnFirstDelta called more than once")
	}
}

// CutNext cuts a stream after its first text delta; ErrorEventNext ends
// it there with an error event, on each wire as that API sends one.
func TestStreamFaults(t *testing.T) {
	t.Parallel()
	srv := modeltest.New(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
		return modeltest.Turn{Text: strings.Repeat("word ", 50)}, nil
	})
	openAIBody := `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"hi"}]}`

	srv.CutNext(1)
	events, err := allEvents(t, open(t, srv.URL()+"/v1/messages", anthropicStreamRequest, anthropicHeaders...))
	if !errors.Is(err, io.ErrUnexpectedEOF) || events[len(events)-1].name != "content_block_delta" {
		t.Errorf("cut stream: %d events, last %v; err %v, want unexpected EOF", len(events), events[len(events)-1], err)
	}
	// Only the next: the one after is whole.
	if _, err := allEvents(t, open(t, srv.URL()+"/v1/messages", anthropicStreamRequest, anthropicHeaders...)); err != nil {
		t.Errorf("the stream after the cut: %v", err)
	}

	srv.ErrorEventNext("overloaded_error", 2)
	events, err = allEvents(t, open(t, srv.URL()+"/v1/messages", anthropicStreamRequest, anthropicHeaders...))
	last := events[len(events)-1]
	if err != nil || last.name != "error" || get(last.data, "error", "type") != "overloaded_error" || get(last.data, "error", "message") != "Overloaded" {
		t.Errorf("error event: %v, %v", last, err)
	}
	events, err = allEvents(t, open(t, srv.URL()+"/v1/chat/completions", openAIBody))
	last = events[len(events)-1]
	if err != nil || get(last.data, "error", "type") != "server_error" || last.done {
		t.Errorf("error chunk: %v, %v", last, err)
	}

	srv.ErrorEventNext("rate_limit_error", 1)
	events, _ = allEvents(t, open(t, srv.URL()+"/v1/chat/completions", openAIBody))
	if last := events[len(events)-1]; get(last.data, "error", "code") != "rate_limit_exceeded" {
		t.Errorf("rate limit chunk: %v", last)
	}

	// A reply that is not streamed fails with the status instead.
	srv.ErrorEventNext("rate_limit_error", 1)
	status, _, body := post(t, srv.URL()+"/v1/messages", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`, anthropicHeaders...)
	if status != 429 || get(body, "error", "type") != "rate_limit_error" {
		t.Errorf("whole reply: status %d, %v", status, body)
	}
}

// Thinking sent back must be the server's own, byte for byte, and, with
// thinking enabled, come with the calls it came with.
func TestThinkingChecked(t *testing.T) {
	t.Parallel()
	srv := modeltest.New(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
		return modeltest.Turn{Thinking: "let me see", Calls: []modeltest.Call{{ID: "toolu_1", Name: "Bash"}}}, nil
	})
	first := `{"model":"m","max_tokens":2000,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"hi"}]}`
	status, _, body := post(t, srv.URL()+"/v1/messages", first, anthropicHeaders...)
	if status != 200 || get(body, "content", 0, "type") != "thinking" || get(body, "content", 0, "thinking") != "let me see" {
		t.Fatalf("first reply: %d %v", status, body)
	}
	thinking, _ := json.Marshal(get(body, "content", 0))
	second := func(assistant string, enabled bool) string {
		th := `"thinking":{"type":"enabled","budget_tokens":1024},`
		if !enabled {
			th = ""
		}
		return `{"model":"m","max_tokens":2000,` + th + `"messages":[{"role":"user","content":"hi"},
			{"role":"assistant","content":[` + assistant + `]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"ok"}]}]}`
	}
	use := `{"type":"tool_use","id":"toolu_1","name":"Bash","input":{}}`
	altered := strings.Replace(string(thinking), "let me see", "let me see!", 1)
	cached := strings.Replace(string(thinking), `"type":"thinking"`, `"type":"thinking","cache_control":{"type":"ephemeral"}`, 1)
	tests := []struct {
		name, assistant string
		enabled         bool
		wantStatus      int
		wantMessage     string
	}{
		{"intact", string(thinking) + "," + use, true, 200, ""},
		{"altered", altered + "," + use, true, 400, "messages.1.content.0: Invalid `signature` in `thinking` block"},
		{"dropped", use, true, 400, "Expected `thinking` or `redacted_thinking`, but found `tool_use`"},
		{"dropped, thinking off", use, false, 200, ""},
		{"cache_control", cached + "," + use, true, 400, "thinking blocks cannot carry cache_control"},
	}
	for _, tc := range tests {
		status, _, body := post(t, srv.URL()+"/v1/messages", second(tc.assistant, tc.enabled), anthropicHeaders...)
		msg, _ := get(body, "error", "message").(string)
		if status != tc.wantStatus || !strings.Contains(msg, tc.wantMessage) {
			t.Errorf("%s: status %d, %v; want %d saying %q", tc.name, status, body, tc.wantStatus, tc.wantMessage)
		}
	}
}

// The fake refuses what the APIs refuse.
func TestRejectsParameters(t *testing.T) {
	t.Parallel()
	srv := modeltest.New(t, nil)
	srv.SetContextWindow(50)
	long := strings.Repeat("x", 400)
	tests := []struct {
		name, path, body string
		wantMessage      string
		wantCode         any
	}{
		{"max_tokens to gpt-5", "/v1/chat/completions", `{"model":"gpt-5-mini","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`,
			"Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.", "unsupported_parameter"},
		{"max_tokens to o3", "/v1/chat/completions", `{"model":"o3","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`,
			"Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.", "unsupported_parameter"},
		{"reasoning_effort", "/v1/chat/completions", `{"model":"o3","reasoning_effort":"extreme","messages":[{"role":"user","content":"hi"}]}`,
			"Invalid value: 'extreme'. Supported values are: 'minimal', 'low', 'medium', and 'high'.", "invalid_value"},
		{"openai window", "/v1/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"` + long + `"}]}`,
			"This model's maximum context length is 50 tokens. However, your messages resulted in 109 tokens. Please reduce the length of the messages.", "context_length_exceeded"},
		{"anthropic window", "/v1/messages", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"` + long + `"}]}`,
			"prompt is too long: 101 tokens > 50 maximum", nil},
		{"thinking budget", "/v1/messages", `{"model":"m","max_tokens":1000,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"hi"}]}`,
			"`max_tokens` must be greater than `thinking.budget_tokens`", nil},
		{"five breakpoints", "/v1/messages", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[` +
			strings.TrimSuffix(strings.Repeat(`{"type":"text","text":"a","cache_control":{"type":"ephemeral"}},`, 5), ",") + `]}]}`,
			"A maximum of 4 blocks with cache_control may be provided. Found 5.", nil},
		{"1h after 5m", "/v1/messages", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[
			{"type":"text","text":"a","cache_control":{"type":"ephemeral"}},{"type":"text","text":"b","cache_control":{"type":"ephemeral","ttl":"1h"}}]}]}`,
			"cache_control: a ttl='1h' breakpoint must not come after a ttl='5m' one", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			status, _, body := post(t, srv.URL()+tc.path, tc.body, anthropicHeaders...)
			if status != 400 || get(body, "error", "message") != tc.wantMessage || (tc.wantCode != nil && get(body, "error", "code") != tc.wantCode) {
				t.Errorf("status %d, body %v; want 400 saying %q", status, body, tc.wantMessage)
			}
		})
	}
	// max_completion_tokens, and max_tokens to other models, are taken.
	for _, body := range []string{
		`{"model":"gpt-5-mini","max_completion_tokens":10,"reasoning_effort":"minimal","prompt_cache_retention":"24h","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"llama3","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`,
	} {
		if status, _, resp := post(t, srv.URL()+"/v1/chat/completions", body); status != 200 {
			t.Errorf("%s: status %d, %v", body, status, resp)
		}
	}
	c := srv.Requests()[len(srv.Requests())-2]
	if c.MaxTokens != 10 || c.ReasoningEffort != "minimal" || c.CacheTTL != "24h" {
		t.Errorf("conversation = %+v", c)
	}
}
