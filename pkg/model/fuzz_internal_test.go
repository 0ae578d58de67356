package model

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// checkResponse checks what a decoder made of a provider's response: token
// counts that budgets can add up (never negative), blocks of our kinds
// whose inputs are JSON, and an assistant turn the same provider's encoder
// takes back into the next request.
func checkResponse(t *testing.T, data []byte, resp Response, encode func(Request) ([]byte, error)) {
	t.Helper()
	if resp.Usage.InputTokens < 0 || resp.Usage.OutputTokens < 0 {
		t.Fatalf("response %q: usage %+v", data, resp.Usage)
	}
	for _, b := range resp.Content {
		switch b.Type {
		case TextBlock, ThinkingBlock, RedactedThinkingBlock:
		case ToolUseBlock:
			if b.Input != nil && !json.Valid(b.Input) {
				t.Fatalf("response %q: tool input %q is not JSON", data, b.Input)
			}
		default:
			t.Fatalf("response %q: a %q block", data, b.Type)
		}
	}
	req := Request{Model: "m", Messages: []Message{{Role: User, Content: []Block{{Type: TextBlock, Text: "hi"}}}, {Role: Assistant, Content: resp.Content}}}
	body, err := encode(req)
	if err != nil {
		t.Fatalf("response %q: its turn does not encode: %v", data, err)
	}
	if !json.Valid(body) {
		t.Fatalf("response %q: its turn encodes as %q", data, body)
	}
}

// FuzzDecodeAnthropic decodes Messages API responses.
func FuzzDecodeAnthropic(f *testing.F) {
	for _, s := range []string{
		`{"model":"claude","content":[{"type":"text","text":"Hi"},{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"ls"}}],"stop_reason":"tool_use","usage":{"input_tokens":10,"output_tokens":5,"cache_read_input_tokens":3}}`,
		`{"content":[{"type":"thinking","thinking":"hm"},{"type":"tool_use","id":"t2","name":"Read"}],"usage":{"input_tokens":-100,"output_tokens":-1}}`,
		`{"content":[{"type":"text"}],"usage":{"input_tokens":9223372036854775807,"cache_read_input_tokens":9223372036854775807}}`,
		`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
		`null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		resp, err := decodeAnthropic(data)
		if err != nil {
			return
		}
		checkResponse(t, data, resp, encodeAnthropicStreamed)
	})
}

// FuzzDecodeOpenAI decodes Chat Completions responses. Tool calls come
// back with an ID, and their arguments as the model wrote them.
func FuzzDecodeOpenAI(f *testing.F) {
	for _, s := range []string{
		`{"model":"gpt","choices":[{"message":{"role":"assistant","content":"Hi","tool_calls":[{"id":"c1","type":"function","function":{"name":"Bash","arguments":"{\"command\":\"ls\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":10,"completion_tokens":5}}`,
		`{"choices":[{"message":{"content":null,"refusal":"no","tool_calls":[{"function":{"name":"Bash","arguments":"{not json"}}]}}],"usage":{"prompt_tokens":-7}}`,
		`{"choices":[{"message":{"tool_calls":[{"function":{"arguments":"  "}}]}}]}`,
		`{"choices":[]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		resp, err := decodeOpenAI(data)
		if err != nil {
			return
		}
		checkResponse(t, data, resp, encodeOpenAIModern)
		var wire openAIResponse
		if err := json.Unmarshal(data, &wire); err != nil {
			t.Fatal(err)
		}
		calls := wire.Choices[0].Message.ToolCalls
		i := 0
		for _, b := range resp.Content {
			if b.Type != ToolUseBlock {
				continue
			}
			if b.ID == "" {
				t.Fatalf("response %q: a tool call without an ID", data)
			}
			args := calls[i].Function.Arguments
			if got, want := inputArguments(b.Input), strings.TrimSpace(args); got != want && !(want == "" && got == "{}") && got != args {
				t.Fatalf("response %q: arguments %q come back as %q", data, args, got)
			}
			i++
		}
	})
}

// FuzzDecodeStreams decodes streamed responses of both providers: no
// event stream makes a decoder fail other than by an error, and what it
// assembles is a response like the whole ones.
func FuzzDecodeStreams(f *testing.F) {
	for _, s := range []string{
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"m\",\"content\":[],\"usage\":{\"input_tokens\":3}}}\n\n" +
			"data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"Bash\",\"input\":{}}}\n\n" +
			"data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"a\"}}\n\n" +
			"data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":-5}}\n\n" +
			"data: {\"type\":\"message_stop\"}\n\n",
		"data: {\"choices\":[{\"delta\":{\"content\":\"hi\",\"tool_calls\":[{\"index\":3,\"function\":{\"arguments\":\"{x\"}}]}}],\"usage\":{\"prompt_tokens\":-1}}\n\ndata: [DONE]\n\n",
		"data: {\"error\":{\"type\":\"overloaded_error\"}}\n\n",
		"data: [DONE]\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, p := range []struct {
			stream func(*sseReader, func(Delta)) (Response, error)
			encode func(Request) ([]byte, error)
		}{{decodeAnthropicStream, encodeAnthropicStreamed}, {decodeOpenAIStream, encodeOpenAIModern}} {
			resp, err := p.stream(newSSEReader(bufio.NewReaderSize(bytes.NewReader(data), 16)), func(Delta) {})
			if err == nil {
				checkResponse(t, data, resp, p.encode)
			}
		}
	})
}

func encodeOpenAIModern(req Request) ([]byte, error) { return encodeOpenAI(req, false, true) }

func encodeAnthropicStreamed(req Request) ([]byte, error) { return encodeAnthropic(req, true) }

// FuzzRetryAfter reads a rate-limited response's retry headers: a wait
// is never negative.
func FuzzRetryAfter(f *testing.F) {
	for _, s := range [][2]string{{"", "2"}, {"250", "1"}, {"soon", "later"}, {"", "Wed, 21 Oct 2015 07:28:00 GMT"}, {"-1", "1e300"}, {"NaN", "Inf"}} {
		f.Add(s[0], s[1])
	}
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	f.Fuzz(func(t *testing.T, ms, s string) {
		h := http.Header{}
		h.Set("retry-after-ms", ms)
		h.Set("retry-after", s)
		if d, ok := retryAfter(h, now); d < 0 || (!ok && d != 0) {
			t.Fatalf("retry-after-ms %q, retry-after %q: wait %v, %v", ms, s, d, ok)
		}
	})
}
