package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// anthropicEvent is one event of a streamed Messages API response, as far
// as we read it.
type anthropicEvent struct {
	Type string `json:"type"`
	// Message is message_start's: the response with no content yet, and
	// the usage of its input.
	Message *anthropicResponse `json:"message"`
	Index   int                `json:"index"`
	// ContentBlock is content_block_start's block, empty but for a
	// tool_use's ID and name, or a redacted_thinking's data.
	ContentBlock *anthropicBlock `json:"content_block"`
	Delta        struct {
		Type        string `json:"type"`
		Text        string `json:"text"`
		PartialJSON string `json:"partial_json"`
		Thinking    string `json:"thinking"`
		Signature   string `json:"signature"`
		// StopReason is message_delta's.
		StopReason string `json:"stop_reason"`
	} `json:"delta"`
	// Usage is message_delta's: cumulative counts, output tokens always,
	// the input's where the API repeats them.
	Usage *struct {
		OutputTokens             *int `json:"output_tokens"`
		InputTokens              *int `json:"input_tokens"`
		CacheCreationInputTokens *int `json:"cache_creation_input_tokens"`
		CacheReadInputTokens     *int `json:"cache_read_input_tokens"`
	} `json:"usage"`
}

// anthropicStream assembles a streamed response into the
// [anthropicResponse] the API would have answered whole.
type anthropicStream struct {
	resp    anthropicResponse
	started bool
	// blocks are the content blocks by the event's index; at is where
	// each is in our response's content, -1 for a block we drop.
	blocks []*streamBlock
	kept   int
}

// streamBlock is a content block being assembled.
type streamBlock struct {
	block   anthropicBlock
	at      int
	stopped bool
	text    strings.Builder
	// input gathers a tool_use's partial JSON, signature a thinking
	// block's signature: added to once per delta, never copied whole,
	// so that a stream of many tiny deltas takes linear time.
	input     []byte
	signature strings.Builder
}

// decodeAnthropicStream reads a streamed Messages API response up to its
// message_stop, handing each piece of text, thinking and tool input to
// emit as it is read.
func decodeAnthropicStream(r *sseReader, emit func(Delta)) (Response, error) {
	var s anthropicStream
	for {
		data, err := r.next()
		if errors.Is(err, io.EOF) {
			return Response{}, fmt.Errorf("anthropic: the stream ended before message_stop: %w", io.ErrUnexpectedEOF)
		}
		if err != nil {
			return Response{}, fmt.Errorf("anthropic: read stream: %w", err)
		}
		var ev anthropicEvent
		if err := json.Unmarshal(data, &ev); err != nil {
			return Response{}, notRetried{fmt.Errorf("anthropic: decode stream event: %w", err)}
		}
		done, err := s.add(&ev, data, emit)
		if err != nil {
			return Response{}, err
		}
		if done {
			return s.resp.response(), nil
		}
	}
}

// add takes in one event, and reports whether it ended the message.
func (s *anthropicStream) add(ev *anthropicEvent, data []byte, emit func(Delta)) (bool, error) {
	switch ev.Type {
	case "message_start":
		if ev.Message == nil {
			return false, malformed("message_start without a message")
		}
		s.resp = *ev.Message
		s.resp.Content = nil
		s.started = true
	case "content_block_start":
		if ev.ContentBlock == nil || ev.Index != len(s.blocks) {
			return false, malformed(fmt.Sprintf("content_block_start %d out of order", ev.Index))
		}
		b := &streamBlock{block: *ev.ContentBlock, at: -1}
		if b.block.Type == TextBlock && b.block.Text == nil {
			// A text block started without its empty text (as some
			// compatible servers start it) is kept all the same, as it
			// is once its deltas are added: its pieces are heard at the
			// index it has in the response.
			b.block.Text = new(string)
		}
		if _, keep := b.block.block(); keep {
			b.at = s.kept
			s.kept++
		}
		s.blocks = append(s.blocks, b)
		if b.block.Type == ToolUseBlock && b.at >= 0 && emit != nil {
			emit(Delta{Index: b.at, Kind: DeltaToolUse, ID: b.block.ID, Name: b.block.Name})
		}
	case "content_block_delta":
		b, err := s.block(ev.Index)
		if err != nil {
			return false, err
		}
		b.delta(ev, emit)
	case "content_block_stop":
		b, err := s.block(ev.Index)
		if err != nil {
			return false, err
		}
		b.stop()
	case "message_delta":
		if ev.Delta.StopReason != "" {
			s.resp.StopReason = ev.Delta.StopReason
		}
		if u := ev.Usage; u != nil {
			set(&s.resp.Usage.OutputTokens, u.OutputTokens)
			set(&s.resp.Usage.InputTokens, u.InputTokens)
			set(&s.resp.Usage.CacheCreationInputTokens, u.CacheCreationInputTokens)
			set(&s.resp.Usage.CacheReadInputTokens, u.CacheReadInputTokens)
		}
	case "message_stop":
		if !s.started {
			return false, malformed("message_stop before message_start")
		}
		for _, b := range s.blocks {
			b.stop()
			s.resp.Content = append(s.resp.Content, b.block)
		}
		return true, nil
	case "error":
		return false, eventError("anthropic", data)
	}
	// ping, and events added to the API since, carry nothing we keep.
	return false, nil
}

func (s *anthropicStream) block(i int) (*streamBlock, error) {
	if i < 0 || i >= len(s.blocks) {
		return nil, malformed(fmt.Sprintf("an event for content block %d, which has not started", i))
	}
	return s.blocks[i], nil
}

// delta adds a content_block_delta to b.
func (b *streamBlock) delta(ev *anthropicEvent, emit func(Delta)) {
	var kind, piece string
	switch ev.Delta.Type {
	case "text_delta":
		kind, piece = DeltaText, ev.Delta.Text
		b.text.WriteString(piece)
	case "thinking_delta":
		kind, piece = DeltaThinking, ev.Delta.Thinking
		b.text.WriteString(piece)
	case "input_json_delta":
		kind, piece = DeltaToolUse, ev.Delta.PartialJSON
		b.input = append(b.input, piece...)
	case "signature_delta":
		b.signature.WriteString(ev.Delta.Signature)
	}
	if piece != "" && b.at >= 0 && emit != nil {
		emit(Delta{Index: b.at, Kind: kind, Text: piece})
	}
}

// stop completes b from what its deltas added, once.
func (b *streamBlock) stop() {
	if b.stopped {
		return
	}
	b.stopped = true
	if b.signature.Len() > 0 {
		sig := deref(b.block.Signature) + b.signature.String()
		b.block.Signature = &sig
	}
	switch b.block.Type {
	case TextBlock:
		text := deref(b.block.Text) + b.text.String()
		b.block.Text = &text
	case ThinkingBlock:
		thinking := deref(b.block.Thinking) + b.text.String()
		b.block.Thinking = &thinking
	case ToolUseBlock:
		if len(b.input) > 0 {
			// Whole, the response holds the input as JSON; partial JSON
			// that does not add up to it is kept as a JSON string, for the
			// caller to tell the model, as the OpenAI client does.
			b.block.Input = argumentsInput(string(b.input))
		}
	}
}

// set sets *dst to *v when the event has v.
func set(dst *int, v *int) {
	if v != nil {
		*dst = *v
	}
}

// malformed is the error of a stream whose events do not add up.
func malformed(what string) error {
	return notRetried{fmt.Errorf("anthropic: malformed stream: %s", what)}
}
