package model

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

func sse(s string) *sseReader {
	return newSSEReader(bufio.NewReaderSize(strings.NewReader(s), 16))
}

func TestSSEReader(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 100) // longer than the buffer
	r := sse(": comment\r\nevent: a\r\ndata: one\r\n\r\n" +
		"data:two\ndata:  three\nid: 7\nretry: 10\n\n" +
		"\n\n" +
		"event: only a name\n\n" +
		"data: " + long + "\n\n" +
		"data\n\n" +
		"data: unended\n")
	var got []string
	for {
		data, err := r.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("next: %v", err)
		}
		got = append(got, string(data))
	}
	want := []string{"one", "two\n three", long, "", "unended"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("events = %q, want %q", got, want)
	}
	if _, err := sse("data: cut in the mid").next(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a stream cut inside a line: err = %v, want io.ErrUnexpectedEOF", err)
	}
	// Bytes arriving one at a time make the same events.
	r = newSSEReader(bufio.NewReader(iotest.OneByteReader(strings.NewReader("data: a\n\ndata: b\n\n"))))
	for _, want := range []string{"a", "b"} {
		if data, err := r.next(); err != nil || string(data) != want {
			t.Errorf("one byte at a time: %q, %v; want %q", data, err, want)
		}
	}
}

// A stream with every kind of block and event the API sends decodes to
// what the same response gives whole.
func TestDecodeAnthropicStreamBlocks(t *testing.T) {
	t.Parallel()
	stream := `event: message_start
data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-x","content":[],"stop_reason":null,"usage":{"input_tokens":10,"cache_creation_input_tokens":4,"cache_read_input_tokens":6,"cache_creation":{"ephemeral_5m_input_tokens":1,"ephemeral_1h_input_tokens":3},"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}

event: ping
data: {"type":"ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me "}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"see."}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"c2ln"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"redacted_thinking","data":"b3BhcXVl"}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: content_block_start
data: {"type":"content_block_start","index":2,"content_block":{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{}}}

event: content_block_stop
data: {"type":"content_block_stop","index":2}

event: content_block_start
data: {"type":"content_block_start","index":3,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":3,"delta":{"type":"text_delta","text":"Hi "}}

event: content_block_delta
data: {"type":"content_block_delta","index":3,"delta":{"type":"text_delta","text":"there"}}

event: content_block_stop
data: {"type":"content_block_stop","index":3}

event: content_block_start
data: {"type":"content_block_start","index":4,"content_block":{"type":"tool_use","id":"toolu_1","name":"Bash","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":4,"delta":{"type":"input_json_delta","partial_json":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":4,"delta":{"type":"input_json_delta","partial_json":"{\"command\": "}}

event: content_block_delta
data: {"type":"content_block_delta","index":4,"delta":{"type":"input_json_delta","partial_json":"\"ls\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":4}

event: content_block_start
data: {"type":"content_block_start","index":5,"content_block":{"type":"tool_use","id":"toolu_2","name":"Glob","input":{}}}

event: content_block_stop
data: {"type":"content_block_stop","index":5}

event: some_future_event
data: {"type":"some_future_event"}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":42,"input_tokens":10,"cache_creation_input_tokens":4,"cache_read_input_tokens":6}}

event: message_stop
data: {"type":"message_stop"}

`
	whole := `{"model":"claude-x","content":[
		{"type":"thinking","thinking":"Let me see.","signature":"c2ln"},
		{"type":"redacted_thinking","data":"b3BhcXVl"},
		{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{}},
		{"type":"text","text":"Hi there"},
		{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command": "ls"}},
		{"type":"tool_use","id":"toolu_2","name":"Glob","input":{}}],
		"stop_reason":"tool_use",
		"usage":{"input_tokens":10,"cache_creation_input_tokens":4,"cache_read_input_tokens":6,"cache_creation":{"ephemeral_1h_input_tokens":3},"output_tokens":42}}`
	var deltas []Delta
	got, err := decodeAnthropicStream(sse(stream), func(d Delta) { deltas = append(deltas, d) })
	if err != nil {
		t.Fatalf("decode stream: %v", err)
	}
	want, err := decodeAnthropic([]byte(whole))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("streamed:\n%+v\nwhole:\n%+v", got, want)
	}
	if want.Usage != (Usage{InputTokens: 20, OutputTokens: 42, CacheReadTokens: 6, CacheWriteTokens: 4, CacheWriteLongTokens: 3}) {
		t.Errorf("usage = %+v", want.Usage)
	}
	wantDeltas := []Delta{
		{Index: 0, Kind: DeltaThinking, Text: "Let me "},
		{Index: 0, Kind: DeltaThinking, Text: "see."},
		{Index: 2, Kind: DeltaText, Text: "Hi "},
		{Index: 2, Kind: DeltaText, Text: "there"},
		{Index: 3, Kind: DeltaToolUse, ID: "toolu_1", Name: "Bash"},
		{Index: 3, Kind: DeltaToolUse, Text: `{"command": `},
		{Index: 3, Kind: DeltaToolUse, Text: `"ls"}`},
		{Index: 4, Kind: DeltaToolUse, ID: "toolu_2", Name: "Glob"},
	}
	if !reflect.DeepEqual(deltas, wantDeltas) {
		t.Errorf("deltas:\n%+v\nwant\n%+v", deltas, wantDeltas)
	}
}

func TestDecodeAnthropicStreamFailures(t *testing.T) {
	t.Parallel()
	start := "data: {\"type\":\"message_start\",\"message\":{\"model\":\"m\",\"content\":[],\"usage\":{}}}\n\n"
	tests := []struct {
		name   string
		stream string
		check  func(error) bool
	}{
		{"cut", start + "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n", func(err error) bool {
			return errors.Is(err, io.ErrUnexpectedEOF) && !isFinal(err)
		}},
		{"empty", "", func(err error) bool { return errors.Is(err, io.ErrUnexpectedEOF) }},
		{"overloaded", start + "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n", func(err error) bool {
			e, ok := errors.AsType[*APIError](err)
			return ok && e.Event && e.Status == 529 && e.Message == "Overloaded" && !errors.Is(err, ErrPermanent)
		}},
		{"invalid", start + "data: {\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"no\"}}\n\n", func(err error) bool {
			e, ok := errors.AsType[*APIError](err)
			return ok && e.Status == 400 && errors.Is(err, ErrPermanent)
		}},
		{"not json", "data: {oops\n\n", isFinal},
		{"delta before start", start + "data: {\"type\":\"content_block_delta\",\"index\":3,\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n\n", isFinal},
		{"stop before start", "data: {\"type\":\"message_stop\"}\n\n", isFinal},
	}
	for _, tc := range tests {
		_, err := decodeAnthropicStream(sse(tc.stream), nil)
		if err == nil || !tc.check(err) {
			t.Errorf("%s: err = %v", tc.name, err)
		}
	}
}

func isFinal(err error) bool {
	_, ok := errors.AsType[notRetried](err)
	return ok
}

// Chunks from OpenAI and from the servers that copy it, each with its
// habits, decode to what the same response gives whole.
func TestDecodeOpenAIStream(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, stream, whole string
		wantDeltas          []Delta
	}{
		{
			name: "openai",
			stream: `data: {"id":"c1","object":"chat.completion.chunk","model":"gpt-x","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"finish_reason":null}],"usage":null}

data: {"model":"gpt-x","choices":[{"index":0,"delta":{"content":"Look"},"finish_reason":null}],"usage":null}

data: {"model":"gpt-x","choices":[{"index":0,"delta":{"content":"ing."},"finish_reason":null}],"usage":null}

data: {"model":"gpt-x","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"Read","arguments":""}}]},"finish_reason":null}],"usage":null}

data: {"model":"gpt-x","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"file_path\":"}}]},"finish_reason":null}],"usage":null}

data: {"model":"gpt-x","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"/y\"}"}}]},"finish_reason":null}],"usage":null}

data: {"model":"gpt-x","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"Bash","arguments":"{\"command\": \"ls"}}]},"finish_reason":null}],"usage":null}

data: {"model":"gpt-x","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"usage":null}

data: {"model":"gpt-x","choices":[],"usage":{"prompt_tokens":50,"completion_tokens":9,"prompt_tokens_details":{"cached_tokens":32}}}

data: [DONE]

`,
			whole: `{"model":"gpt-x","choices":[{"message":{"role":"assistant","content":"Looking.","tool_calls":[
				{"id":"call_a","type":"function","function":{"name":"Read","arguments":"{\"file_path\":\"/y\"}"}},
				{"id":"call_b","type":"function","function":{"name":"Bash","arguments":"{\"command\": \"ls"}}]},
				"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":50,"completion_tokens":9,"prompt_tokens_details":{"cached_tokens":32}}}`,
			wantDeltas: []Delta{
				{Index: 0, Kind: DeltaText, Text: "Look"},
				{Index: 0, Kind: DeltaText, Text: "ing."},
				{Index: 1, Kind: DeltaToolUse, ID: "call_a", Name: "Read"},
				{Index: 1, Kind: DeltaToolUse, Text: `{"file_path":`},
				{Index: 1, Kind: DeltaToolUse, Text: `"/y"}`},
				{Index: 2, Kind: DeltaToolUse, ID: "call_b", Name: "Bash", Text: `{"command": "ls`},
			},
		},
		{
			// Whole calls in one chunk, without an index or an ID.
			name: "local server",
			stream: `data: {"model":"llama","choices":[{"delta":{"role":"assistant","content":null,"tool_calls":[{"function":{"name":"Bash","arguments":"{\"command\":\"ls\"}"}}]}}]}

data: {"model":"llama","choices":[{"delta":{"tool_calls":[{"id":"x1","function":{"name":"Read","arguments":"{}"}},{"id":"x2","function":{"name":"Glob","arguments":""}}]},"finish_reason":"tool_calls"}]}

data:[DONE]
`,
			whole: `{"model":"llama","choices":[{"message":{"role":"assistant","content":null,"tool_calls":[
				{"function":{"name":"Bash","arguments":"{\"command\":\"ls\"}"}},
				{"id":"x1","function":{"name":"Read","arguments":"{}"}},
				{"id":"x2","function":{"name":"Glob","arguments":""}}]},"finish_reason":"tool_calls"}]}`,
			wantDeltas: []Delta{
				{Index: 0, Kind: DeltaToolUse, Name: "Bash", Text: `{"command":"ls"}`},
				{Index: 1, Kind: DeltaToolUse, ID: "x1", Name: "Read", Text: "{}"},
				{Index: 2, Kind: DeltaToolUse, ID: "x2", Name: "Glob"},
			},
		},
		{
			name: "refusal",
			stream: `data: {"model":"gpt-x","choices":[{"index":0,"delta":{"role":"assistant","content":null,"refusal":""}}]}

data: {"model":"gpt-x","choices":[{"index":0,"delta":{"refusal":"I can't "}}]}

data: {"model":"gpt-x","choices":[{"index":0,"delta":{"refusal":"help."},"finish_reason":"stop"}]}

data: [DONE]

`,
			whole:      `{"model":"gpt-x","choices":[{"message":{"role":"assistant","content":null,"refusal":"I can't help."},"finish_reason":"stop"}]}`,
			wantDeltas: []Delta{{Index: 0, Kind: DeltaText, Text: "I can't "}, {Index: 0, Kind: DeltaText, Text: "help."}},
		},
	}
	for _, tc := range tests {
		var deltas []Delta
		got, err := decodeOpenAIStream(sse(tc.stream), func(d Delta) { deltas = append(deltas, d) })
		if err != nil {
			t.Fatalf("%s: decode stream: %v", tc.name, err)
		}
		want, err := decodeOpenAI([]byte(tc.whole))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: streamed:\n%+v\nwhole:\n%+v", tc.name, got, want)
		}
		if !reflect.DeepEqual(deltas, tc.wantDeltas) {
			t.Errorf("%s: deltas:\n%+v\nwant\n%+v", tc.name, deltas, tc.wantDeltas)
		}
	}
}

func TestDecodeOpenAIStreamFailures(t *testing.T) {
	t.Parallel()
	first := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n"
	status := func(want int, permanent bool) func(error) bool {
		return func(err error) bool {
			e, ok := errors.AsType[*APIError](err)
			return ok && e.Event && e.Status == want && errors.Is(err, ErrPermanent) == permanent
		}
	}
	tests := []struct {
		name   string
		stream string
		check  func(error) bool
	}{
		{"cut", first, func(err error) bool { return errors.Is(err, io.ErrUnexpectedEOF) && !isFinal(err) }},
		{"server error", first + `data: {"error":{"message":"boom","type":"server_error","param":null,"code":null}}` + "\n\n", status(500, false)},
		{"rate limit", first + `data: {"error":{"message":"slow","type":"tokens","code":"rate_limit_exceeded"}}` + "\n\n", status(429, false)},
		{"gateway code", first + "event: error\n" + `data: {"error":{"code":502,"message":"upstream"}}` + "\n\n", status(502, false)},
		{"invalid", first + `data: {"error":{"message":"bad","type":"invalid_request_error","code":"context_length_exceeded"}}` + "\n\n", status(400, true)},
		{"no choices", "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1}}\n\ndata: [DONE]\n\n", func(err error) bool { return strings.Contains(err.Error(), "no choices") && isFinal(err) }},
		{"not json", "data: nope\n\n", isFinal},
	}
	for _, tc := range tests {
		_, err := decodeOpenAIStream(sse(tc.stream), nil)
		if err == nil || !tc.check(err) {
			t.Errorf("%s: err = %v", tc.name, err)
		}
	}
}

// Requests stream, and carry what the request asks for.
func TestEncodeStreams(t *testing.T) {
	t.Parallel()
	req := Request{Model: "m", Messages: []Message{{Role: User, Content: []Block{{Type: TextBlock, Text: "hi"}}}}}
	for name, encode := range map[string]func(Request) ([]byte, error){"anthropic": encodeAnthropicStreamed, "openai": encodeOpenAIModern} {
		body, err := encode(req)
		if err != nil {
			t.Fatal(err)
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(body, &fields); err != nil {
			t.Fatal(err)
		}
		if string(fields["stream"]) != "true" {
			t.Errorf("%s: stream = %s", name, fields["stream"])
		}
		if name == "openai" && string(fields["stream_options"]) != `{"include_usage":true}` {
			t.Errorf("openai: stream_options = %s", fields["stream_options"])
		}
	}
}

func TestCappedReader(t *testing.T) {
	t.Parallel()
	r := &cappedReader{r: strings.NewReader("0123456789"), left: 10}
	if data, err := io.ReadAll(r); err != nil || string(data) != "0123456789" {
		t.Errorf("at the limit: %q, %v", data, err)
	}
	r = &cappedReader{r: strings.NewReader("0123456789!"), left: 10}
	if _, err := io.ReadAll(r); err == nil || !strings.Contains(err.Error(), "response is larger than") {
		t.Errorf("past the limit: err = %v", err)
	}
}
