package model

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/tool"
)

// benchTurn is a typical agent turn: a paragraph of text and two calls.
var benchTurn = modeltest.Turn{
	Text: strings.Repeat("I will list the workspace, then read the file that defines the handler, and check its tests. ", 6),
	Calls: []modeltest.Call{
		{ID: "call_1", Name: tool.Bash, Input: map[string]any{"command": "ls -la /workspace && git -C /workspace status --short"}},
		{ID: "call_2", Name: tool.Edit, Input: map[string]any{"file_path": "/workspace/handler.go", "old_string": strings.Repeat("old line\n", 20), "new_string": strings.Repeat("new line\n", 20)}},
	},
}

// benchBodies returns the response bodies the fake gives benchTurn on a
// provider's wire: streamed, and whole.
func benchBodies(b *testing.B, path string, encode func(Request) ([]byte, error)) (streamed, whole []byte) {
	srv := modeltest.New(b, func(modeltest.Conversation) (modeltest.Turn, error) { return benchTurn, nil })
	req := Request{Model: "m", Messages: []Message{{Role: User, Content: []Block{{Type: TextBlock, Text: "fix the handler"}}}}}
	body, err := encode(req)
	if err != nil {
		b.Fatal(err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		b.Fatal(err)
	}
	fields["stream"] = json.RawMessage("false")
	delete(fields, "stream_options")
	plain, err := json.Marshal(fields)
	if err != nil {
		b.Fatal(err)
	}
	get := func(body []byte) []byte {
		req, err := http.NewRequestWithContext(b.Context(), http.MethodPost, srv.URL()+path, bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("anthropic-version", anthropicVersion)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d, %v: %s", resp.StatusCode, err, data)
		}
		return data
	}
	return get(body), get(plain)
}

// BenchmarkDecodeStreamed decodes a typical turn from its stream, as the
// clients read every response; BenchmarkDecodeJSON decodes the same turn
// answered whole. A stream costs more to decode, its events one by one,
// but its first piece is heard as soon as the provider sends it rather
// than once the whole turn is written.
func BenchmarkDecodeStreamed(b *testing.B) {
	for _, p := range benchProviders {
		b.Run(p.name, func(b *testing.B) {
			streamed, _ := benchBodies(b, p.path, p.encode)
			b.SetBytes(int64(len(streamed)))
			br := bufio.NewReaderSize(nil, sseBuffer)
			b.ResetTimer()
			for b.Loop() {
				br.Reset(bytes.NewReader(streamed))
				if _, err := p.wire.stream(newSSEReader(br), nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDecodeJSON(b *testing.B) {
	for _, p := range benchProviders {
		b.Run(p.name, func(b *testing.B) {
			_, whole := benchBodies(b, p.path, p.encode)
			b.SetBytes(int64(len(whole)))
			b.ResetTimer()
			for b.Loop() {
				data, err := readBody(bytes.NewReader(whole), int64(len(whole)), maxBody+1)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := p.wire.json(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

var benchProviders = []struct {
	name, path string
	encode     func(Request) ([]byte, error)
	wire       wire
}{
	{"anthropic", "/v1/messages", encodeAnthropicStreamed, anthropicWire},
	{"openai", "/v1/chat/completions", encodeOpenAIModern, openAIWire},
}
