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
	Model     string             `json:"model"`
	MaxTokens int                `json:"max_tokens"`
	System    string             `json:"system,omitempty"`
	Messages  []anthropicMessage `json:"messages"`
}

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
}

type anthropicTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
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
// and read from the prompt cache.
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
			InputTokens:  tokens(wire.Usage.InputTokens, wire.Usage.CacheCreationInputTokens, wire.Usage.CacheReadInputTokens),
			OutputTokens: tokens(wire.Usage.OutputTokens),
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
		System:    req.System,
		Messages:  make([]anthropicMessage, 0, len(req.Messages)),
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
	tools, err := anthropicTools.encode(req.Tools, func(t tool.Spec) any {
		return anthropicTool{Name: t.Name, Description: t.Description, InputSchema: schemaOrEmpty(t.InputSchema)}
	})
	if err != nil {
		return nil, err
	}
	return marshalWithTools(w, tools)
}

var anthropicTools toolsCache

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
