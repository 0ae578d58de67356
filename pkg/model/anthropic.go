package model

import (
	"bytes"
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
}

// cacheControl marks a prompt cache breakpoint: the prompt up to and
// including the block that carries it is cached (for five minutes, renewed
// by each read).
type cacheControl struct {
	Type string `json:"type"`
}

// ephemeral is the breakpoint every cached request carries.
var ephemeral = &cacheControl{Type: "ephemeral"}

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
	Content      string        `json:"content,omitempty"`
	IsError      bool          `json:"is_error,omitempty"`
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
	Usage      struct {
		InputTokens              int `json:"input_tokens"`
		OutputTokens             int `json:"output_tokens"`
		CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
		CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	} `json:"usage"`
}

// Complete implements [Client]. Usage.InputTokens includes tokens written to
// and read from the prompt cache, which CacheWriteTokens and
// CacheReadTokens count.
func (c *anthropicClient) Complete(ctx context.Context, req Request) (Response, error) {
	body, err := encodeAnthropic(req)
	if err != nil {
		return Response{}, fmt.Errorf("anthropic: %w: %w", ErrPermanent, err)
	}
	data, err := c.p.post(ctx, body)
	if err != nil {
		return Response{}, err
	}
	return decodeAnthropic(data)
}

// decodeAnthropic reads a Messages API response.
func decodeAnthropic(data []byte) (Response, error) {
	var wire anthropicResponse
	if err := json.Unmarshal(data, &wire); err != nil {
		return Response{}, fmt.Errorf("anthropic: decode response: %w", err)
	}
	resp := Response{
		StopReason: wire.StopReason,
		Model:      wire.Model,
		Usage: Usage{
			InputTokens:      tokens(wire.Usage.InputTokens, wire.Usage.CacheCreationInputTokens, wire.Usage.CacheReadInputTokens),
			OutputTokens:     tokens(wire.Usage.OutputTokens),
			CacheReadTokens:  tokens(wire.Usage.CacheReadInputTokens),
			CacheWriteTokens: tokens(wire.Usage.CacheCreationInputTokens),
		},
	}
	for _, b := range wire.Content {
		switch b.Type {
		case TextBlock:
			if b.Text != nil {
				resp.Content = append(resp.Content, Block{Type: TextBlock, Text: *b.Text})
			}
		case ToolUseBlock:
			resp.Content = append(resp.Content, Block{Type: ToolUseBlock, ID: b.ID, Name: b.Name, Input: b.Input})
		}
		// Other blocks (thinking, server tools) are not part of our conversation.
	}
	return resp, nil
}

func encodeAnthropic(req Request) ([]byte, error) {
	w := anthropicRequest{
		Model:     req.Model,
		MaxTokens: req.MaxTokens,
		Messages:  make([]anthropicMessage, 0, len(req.Messages)),
	}
	switch {
	case req.System == "":
	case req.CacheKey != "":
		w.System = []anthropicBlock{{Type: TextBlock, Text: &req.System, CacheControl: ephemeral}}
	default:
		w.System = req.System
	}
	if w.MaxTokens <= 0 {
		w.MaxTokens = defaultMaxTokens
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
			default:
				return nil, fmt.Errorf("message %d: unknown block type %q", i, b.Type)
			}
		}
		w.Messages = append(w.Messages, wm)
	}
	cache, wire := &anthropicTools, func(t tool.Spec) any {
		return anthropicTool{Name: t.Name, Description: t.Description, InputSchema: schemaOrEmpty(t.InputSchema)}
	}
	if req.CacheKey != "" {
		breakpoints(w.Messages)
	}
	if req.CacheKey != "" && len(req.Tools) > 0 {
		last := req.Tools[len(req.Tools)-1].Name
		cache, wire = &anthropicToolsCached, func(t tool.Spec) any {
			at := anthropicTool{Name: t.Name, Description: t.Description, InputSchema: schemaOrEmpty(t.InputSchema)}
			if t.Name == last {
				at.CacheControl = ephemeral
			}
			return at
		}
	}
	tools, err := cache.encode(req.Tools, wire)
	if err != nil {
		return nil, err
	}
	return marshalWithTools(w, tools)
}

// anthropicTools are the tools as every request sends them;
// anthropicToolsCached with a breakpoint on the last, for cached requests.
var anthropicTools, anthropicToolsCached toolsCache

// breakpoints marks the cache breakpoints of a cached request's
// conversation: its last block, which caches the whole prompt for the next
// turn, and the last block of the message two before, where the prompt of
// the turn before ended, which reads that back. With the tools' and the
// system prompt's, four: the API's limit. Each turn so reads what the
// turn before wrote, and writes only what it adds.
func breakpoints(msgs []anthropicMessage) {
	for _, i := range []int{len(msgs) - 3, len(msgs) - 1} {
		if i < 0 || len(msgs[i].Content) == 0 {
			continue
		}
		msgs[i].Content[len(msgs[i].Content)-1].CacheControl = ephemeral
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
