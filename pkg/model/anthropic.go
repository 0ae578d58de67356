package model

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"corral.dev/pkg/tool"
)

const (
	defaultAnthropicURL = "https://api.anthropic.com"
	anthropicVersion    = "2023-06-01"
	defaultMaxTokens    = 4096
)

// anthropicClient talks to the Anthropic Messages API.
type anthropicClient struct {
	p *poster
}

// NewAnthropic returns a [Client] for the Anthropic Messages API. It posts to
// cfg.BaseURL (default https://api.anthropic.com) with any trailing "/" and
// "/v1" removed, followed by "/v1/messages"; so "https://host",
// "https://host/" and "https://host/v1" all reach https://host/v1/messages.
// A request with MaxTokens 0 asks for at most 4096 output tokens.
//
// Every request streams its response ("stream": true), which is read as
// it arrives: [Request.OnDelta] hears each piece, and a stream cut before
// its end, or ended by an overloaded, rate-limit or API error event, is
// asked again like a 5xx. A server that answers JSON instead is read as
// such.
//
// A request with Thinking enables extended thinking with that budget
// (at least the API's minimum, 1,024 tokens), and asks for max_tokens of
// the budget plus MaxTokens: the API counts the thinking within
// max_tokens, which must exceed the budget, so MaxTokens stays what the
// answer itself may take. Thinking blocks come back in the response and
// must be sent back unchanged with the turn; they never carry a cache
// breakpoint.
func NewAnthropic(cfg Config) Client {
	base := cfg.BaseURL
	if base == "" {
		base = defaultAnthropicURL
	}
	base = strings.TrimSuffix(strings.TrimRight(base, "/"), "/v1")
	key := cfg.APIKey
	return &anthropicClient{p: newPoster("anthropic", base+"/v1/messages", cfg, func(h http.Header) {
		if key != "" {
			h.Set("x-api-key", string(key))
		}
		h.Set("anthropic-version", anthropicVersion)
	})}
}

type anthropicRequest struct {
	Model     string `json:"model"`
	MaxTokens int    `json:"max_tokens"`
	// System is the system prompt: a string, or with caching one text
	// block carrying a breakpoint.
	System   any                `json:"system,omitempty"`
	Messages []anthropicMessage `json:"messages"`
	Thinking *anthropicThinking `json:"thinking,omitempty"`
	Stream   bool               `json:"stream,omitempty"`
}

// anthropicThinking enables extended thinking.
type anthropicThinking struct {
	Type         string `json:"type"`
	BudgetTokens int    `json:"budget_tokens"`
}

// minThinking is the smallest thinking budget the API takes.
const minThinking = 1024

// cacheControl marks a prompt cache breakpoint: the prompt up to and
// including the block that carries it is cached (for five minutes, or
// TTL, renewed by each read).
type cacheControl struct {
	Type string `json:"type"`
	TTL  string `json:"ttl,omitempty"`
}

// ephemeral is the breakpoint every cached request carries; ephemeralLong
// the one of a request asking for the longer lifetime ([Request.CacheTTL]
// "1h").
var (
	ephemeral     = &cacheControl{Type: "ephemeral"}
	ephemeralLong = &cacheControl{Type: "ephemeral", TTL: "1h"}
)

type anthropicMessage struct {
	Role    Role             `json:"role"`
	Content []anthropicBlock `json:"content"`
}

// anthropicBlock is a content block as the API writes it. Optional fields
// are pointers or omitempty, so a block carries only its type's fields.
type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	// Content is a string in the results we send; the API also accepts an
	// array of blocks, which we never send.
	Content string `json:"content,omitempty"`
	IsError bool   `json:"is_error,omitempty"`
	// Thinking and Signature are a thinking block's, Data a
	// redacted_thinking block's; pointers, so that a block sent back has
	// them exactly as it came, even empty.
	Thinking     *string       `json:"thinking,omitempty"`
	Signature    *string       `json:"signature,omitempty"`
	Data         *string       `json:"data,omitempty"`
	CacheControl *cacheControl `json:"cache_control,omitempty"`
}

type anthropicTool struct {
	Name         string          `json:"name"`
	Description  string          `json:"description,omitempty"`
	InputSchema  json.RawMessage `json:"input_schema"`
	CacheControl *cacheControl   `json:"cache_control,omitempty"`
}

type anthropicResponse struct {
	Model      string           `json:"model"`
	Content    []anthropicBlock `json:"content"`
	StopReason string           `json:"stop_reason"`
	Usage      anthropicUsage   `json:"usage"`
}

type anthropicUsage struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	// CacheCreation splits CacheCreationInputTokens by lifetime.
	CacheCreation struct {
		Ephemeral1h int `json:"ephemeral_1h_input_tokens"`
	} `json:"cache_creation"`
}

// anthropicWire reads the Messages API's responses.
var anthropicWire = wire{json: decodeAnthropic, stream: decodeAnthropicStream}

// Complete implements [Client]. Usage.InputTokens includes tokens written to
// and read from the prompt cache, which CacheWriteTokens and
// CacheReadTokens count.
func (c *anthropicClient) Complete(ctx context.Context, req Request) (Response, error) {
	body, err := encodeAnthropic(req, !c.p.noStream)
	if err != nil {
		return Response{}, fmt.Errorf("anthropic: %w: %w", ErrPermanent, err)
	}
	return c.p.post(ctx, body, anthropicWire, req.OnDelta)
}

// decodeAnthropic reads a Messages API response that came whole.
func decodeAnthropic(data []byte) (Response, error) {
	var w anthropicResponse
	if err := json.Unmarshal(data, &w); err != nil {
		return Response{}, fmt.Errorf("anthropic: decode response: %w", err)
	}
	return w.response(), nil
}

// declined is the refusal of a response that stopped with "refusal"
// before saying why.
const declined = "The model declined to answer."

// response turns the API's response, whole or assembled from its stream,
// into ours.
func (w *anthropicResponse) response() Response {
	u := w.Usage
	resp := Response{
		StopReason: w.StopReason,
		Model:      w.Model,
		Usage: Usage{
			InputTokens:      tokens(u.InputTokens, u.CacheCreationInputTokens, u.CacheReadInputTokens),
			OutputTokens:     tokens(u.OutputTokens),
			CacheReadTokens:  tokens(u.CacheReadInputTokens),
			CacheWriteTokens: tokens(u.CacheCreationInputTokens),
			// Of the written, never more.
			CacheWriteLongTokens: min(tokens(u.CacheCreation.Ephemeral1h), tokens(u.CacheCreationInputTokens)),
		},
	}
	for _, b := range w.Content {
		if block, ok := b.block(); ok {
			resp.Content = append(resp.Content, block)
		}
	}
	if resp.StopReason == "refusal" {
		resp.Refusal = cmp.Or(resp.Text(), declined)
	}
	return resp
}

// block returns b as one of ours, and false for the blocks that are not
// part of our conversation (server tools' and any new kind).
func (b *anthropicBlock) block() (Block, bool) {
	switch b.Type {
	case TextBlock:
		if b.Text != nil {
			return Block{Type: TextBlock, Text: *b.Text}, true
		}
	case ToolUseBlock:
		return Block{Type: ToolUseBlock, ID: b.ID, Name: b.Name, Input: b.Input}, true
	case ThinkingBlock:
		return Block{Type: ThinkingBlock, Thinking: deref(b.Thinking), Signature: deref(b.Signature)}, true
	case RedactedThinkingBlock:
		return Block{Type: RedactedThinkingBlock, Data: deref(b.Data)}, true
	}
	return Block{}, false
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func encodeAnthropic(req Request, stream bool) ([]byte, error) {
	w := anthropicRequest{
		Model:     req.Model,
		MaxTokens: req.MaxTokens,
		Messages:  make([]anthropicMessage, 0, len(req.Messages)),
		Stream:    stream,
	}
	mark := ephemeral
	if req.CacheTTL == "1h" {
		mark = ephemeralLong
	}
	switch {
	case req.System == "":
	case req.CacheKey != "":
		w.System = []anthropicBlock{{Type: TextBlock, Text: &req.System, CacheControl: mark}}
	default:
		w.System = req.System
	}
	if w.MaxTokens <= 0 {
		w.MaxTokens = defaultMaxTokens
	}
	if req.Thinking > 0 {
		budget := max(req.Thinking, minThinking)
		w.Thinking = &anthropicThinking{Type: "enabled", BudgetTokens: budget}
		w.MaxTokens += budget
	}
	for i, m := range req.Messages {
		if m.Role != User && m.Role != Assistant {
			return nil, fmt.Errorf("message %d: unknown role %q", i, m.Role)
		}
		wm := anthropicMessage{Role: m.Role, Content: make([]anthropicBlock, 0, len(m.Content))}
		for _, b := range m.Content {
			switch b.Type {
			case TextBlock:
				// The API rejects empty text blocks.
				if b.Text != "" {
					wm.Content = append(wm.Content, anthropicBlock{Type: TextBlock, Text: &b.Text})
				}
			case ToolUseBlock:
				wm.Content = append(wm.Content, anthropicBlock{Type: ToolUseBlock, ID: b.ID, Name: b.Name, Input: objectOrEmpty(b.Input)})
			case ToolResultBlock:
				wm.Content = append(wm.Content, anthropicBlock{Type: ToolResultBlock, ToolUseID: b.ToolUseID, Content: b.Content, IsError: b.IsError})
			case ThinkingBlock:
				// Sent back as it came, which the API checks by its signature.
				wm.Content = append(wm.Content, anthropicBlock{Type: ThinkingBlock, Thinking: &b.Thinking, Signature: &b.Signature})
			case RedactedThinkingBlock:
				wm.Content = append(wm.Content, anthropicBlock{Type: RedactedThinkingBlock, Data: &b.Data})
			default:
				return nil, fmt.Errorf("message %d: unknown block type %q", i, b.Type)
			}
		}
		w.Messages = append(w.Messages, wm)
	}
	cache, toWire := &anthropicTools, func(t tool.Spec) any {
		return anthropicTool{Name: t.Name, Description: t.Description, InputSchema: schemaOrEmpty(t.InputSchema)}
	}
	if req.CacheKey != "" {
		breakpoints(w.Messages, mark)
	}
	if req.CacheKey != "" && len(req.Tools) > 0 {
		last := req.Tools[len(req.Tools)-1].Name
		cache = &anthropicToolsCached
		if mark == ephemeralLong {
			cache = &anthropicToolsCachedLong
		}
		toWire = func(t tool.Spec) any {
			at := anthropicTool{Name: t.Name, Description: t.Description, InputSchema: schemaOrEmpty(t.InputSchema)}
			if t.Name == last {
				at.CacheControl = mark
			}
			return at
		}
	}
	tools, err := cache.encode(req.Tools, toWire)
	if err != nil {
		return nil, err
	}
	return marshalWithTools(w, tools)
}

// anthropicTools are the tools as every request sends them;
// anthropicToolsCached with a breakpoint on the last, for cached requests,
// and anthropicToolsCachedLong with a one-hour breakpoint.
var anthropicTools, anthropicToolsCached, anthropicToolsCachedLong toolsCache

// breakpoints marks with mark the cache breakpoints of a cached request's
// conversation: its last block, which caches the whole prompt for the next
// turn, and the last block of the message two before, where the prompt of
// the turn before ended, which reads that back. With the tools' and the
// system prompt's, four: the API's limit. Each turn so reads what the
// turn before wrote, and writes only what it adds. A thinking block may
// not carry a breakpoint: the last block of a message that is not one
// carries it instead.
func breakpoints(msgs []anthropicMessage, mark *cacheControl) {
	for _, i := range []int{len(msgs) - 3, len(msgs) - 1} {
		if i < 0 {
			continue
		}
		content := msgs[i].Content
		for j := len(content) - 1; j >= 0; j-- {
			if t := content[j].Type; t != ThinkingBlock && t != RedactedThinkingBlock {
				content[j].CacheControl = mark
				break
			}
		}
	}
}

// objectOrEmpty returns input when it is a JSON object and {} otherwise: the
// API insists that a tool_use input be an object, and a call whose
// arguments were not one (kept as a JSON string by the OpenAI client) has
// already been answered with an error result.
func objectOrEmpty(input json.RawMessage) json.RawMessage {
	trimmed := bytes.TrimSpace(input)
	if len(trimmed) > 0 && trimmed[0] == '{' && json.Valid(trimmed) {
		return trimmed
	}
	return json.RawMessage(`{}`)
}

// schemaOrEmpty returns schema, or the schema of an object with no
// properties when it is empty.
func schemaOrEmpty(schema json.RawMessage) json.RawMessage {
	if len(bytes.TrimSpace(schema)) == 0 {
		return json.RawMessage(`{"type":"object","properties":{}}`)
	}
	return schema
}
