package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// openAIChunk is one chunk of a streamed Chat Completions response, as
// far as we read it.
type openAIChunk struct {
	Model   string `json:"model"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Content   *string `json:"content"`
			Refusal   *string `json:"refusal"`
			ToolCalls []struct {
				Index    int    `json:"index"`
				ID       string `json:"id"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	// Usage is in the last chunk, whose choices are empty; some servers
	// send running counts in every chunk.
	Usage *openAIUsage `json:"usage"`
	// Error ends a stream that failed after it began.
	Error json.RawMessage `json:"error"`
}

// openAIStream assembles a streamed response into the [openAIResponse]
// the API would have answered whole.
type openAIStream struct {
	model      string
	usage      openAIUsage
	hasChoice  bool
	finish     string
	content    strings.Builder
	hasContent bool
	refusal    strings.Builder
	calls      []*streamCall
	byIndex    map[int]*streamCall
	// textOffset is the index of the first call's block: 1 when text
	// came before it.
	textOffset int
	callsBegun bool
	hasText    bool
}

// streamCall is a tool call being assembled.
type streamCall struct {
	id, name string
	args     strings.Builder
	at       int
}

// done is the data of the stream's last event.
var done = []byte("[DONE]")

// decodeOpenAIStream reads a streamed Chat Completions response up to its
// [DONE], handing each piece of text (content or refusal) and of a tool
// call's arguments to emit as it is read. A tool call's pieces are at
// its index among the calls, after the text block if text came before
// the calls did, as in the response.
func decodeOpenAIStream(r *sseReader, emit func(Delta)) (Response, error) {
	s := openAIStream{byIndex: make(map[int]*streamCall)}
	for {
		data, err := r.next()
		if errors.Is(err, io.EOF) {
			return Response{}, fmt.Errorf("openai: the stream ended before [DONE]: %w", io.ErrUnexpectedEOF)
		}
		if err != nil {
			return Response{}, fmt.Errorf("openai: read stream: %w", err)
		}
		if bytes.Equal(bytes.TrimSpace(data), done) {
			w := s.response()
			resp, err := w.response()
			if err != nil {
				return Response{}, notRetried{err}
			}
			return resp, nil
		}
		var chunk openAIChunk
		if err := json.Unmarshal(data, &chunk); err != nil {
			return Response{}, notRetried{fmt.Errorf("openai: decode stream chunk: %w", err)}
		}
		if len(chunk.Error) > 0 && string(chunk.Error) != "null" {
			return Response{}, eventError("openai", data)
		}
		s.add(&chunk, emit)
	}
}

// add takes in one chunk.
func (s *openAIStream) add(c *openAIChunk, emit func(Delta)) {
	if s.model == "" {
		s.model = c.Model
	}
	if c.Usage != nil {
		s.usage = *c.Usage
	}
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue // we ask for one choice
		}
		s.hasChoice = true
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			s.finish = *ch.FinishReason
		}
		d := ch.Delta
		if d.Content != nil {
			s.hasContent = true
			s.text(&s.content, *d.Content, emit)
		}
		if d.Refusal != nil {
			s.text(&s.refusal, *d.Refusal, emit)
		}
		for _, tc := range d.ToolCalls {
			call := s.byIndex[tc.Index]
			// A call's first piece has its ID and name, the next ones
			// only arguments; a server that sends whole calls without an
			// index makes a new call with another ID, or a name again.
			if call == nil || (tc.ID != "" && tc.ID != call.id) || (tc.ID == "" && tc.Function.Name != "" && call.name != "") {
				if !s.callsBegun {
					s.callsBegun = true
					if s.hasText {
						s.textOffset = 1
					}
				}
				call = &streamCall{id: tc.ID, name: tc.Function.Name, at: s.textOffset + len(s.calls)}
				s.calls = append(s.calls, call)
				s.byIndex[tc.Index] = call
				call.args.WriteString(tc.Function.Arguments)
				if emit != nil {
					emit(Delta{Index: call.at, Kind: DeltaToolUse, ID: call.id, Name: call.name, Text: tc.Function.Arguments})
				}
				continue
			}
			if call.name == "" {
				call.name = tc.Function.Name
			}
			call.args.WriteString(tc.Function.Arguments)
			if emit != nil && tc.Function.Arguments != "" {
				emit(Delta{Index: call.at, Kind: DeltaToolUse, Text: tc.Function.Arguments})
			}
		}
	}
}

// text adds a piece of content or refusal to b.
func (s *openAIStream) text(b *strings.Builder, piece string, emit func(Delta)) {
	if piece == "" {
		return
	}
	s.hasText = true
	b.WriteString(piece)
	if emit != nil {
		emit(Delta{Index: 0, Kind: DeltaText, Text: piece})
	}
}

// response returns the response the stream added up to.
func (s *openAIStream) response() openAIResponse {
	w := openAIResponse{Model: s.model, Usage: s.usage}
	if !s.hasChoice {
		return w
	}
	msg := openAIMessage{Role: "assistant", Refusal: s.refusal.String()}
	if s.hasContent {
		content := s.content.String()
		msg.Content = &content
	}
	for _, c := range s.calls {
		tc := openAIToolCall{ID: c.id, Type: "function"}
		tc.Function.Name = c.name
		tc.Function.Arguments = c.args.String()
		msg.ToolCalls = append(msg.ToolCalls, tc)
	}
	w.Choices = []openAIChoice{{Message: msg, FinishReason: s.finish}}
	return w
}
