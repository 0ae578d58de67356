package modeltest

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"strings"
)

var anthropicProtocol = protocol{
	name:   "anthropic",
	decode: decodeAnthropic,
	bill: func(c *promptCache, body []byte) usage {
		return c.anthropic(anthropicSegments(body))
	},
	reply:           replyAnthropic,
	errorBody:       anthropicError,
	requestIDHeader: "request-id",
}

// The Messages API request, as far as the fake reads it.
type anthropicRequest struct {
	Model     string `json:"model"`
	MaxTokens int    `json:"max_tokens"`
	// System is a string or an array of text blocks.
	System   json.RawMessage `json:"system"`
	Messages []struct {
		Role string `json:"role"`
		// Content is a string or an array of blocks.
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Tools []struct {
		Name        string          `json:"name"`
		InputSchema json.RawMessage `json:"input_schema"`
	} `json:"tools"`
}

type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	// Content is a string or an array of text blocks.
	Content json.RawMessage `json:"content,omitempty"`
	IsError bool            `json:"is_error,omitempty"`
}

func decodeAnthropic(body []byte, c *Conversation) error {
	var req anthropicRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return fmt.Errorf("decode request: %w", err)
	}
	switch {
	case req.Model == "":
		return fmt.Errorf("model: Field required")
	case req.MaxTokens <= 0:
		return fmt.Errorf("max_tokens: must be at least 1")
	case len(req.Messages) == 0:
		return fmt.Errorf("messages: at least one message is required")
	}
	c.Model, c.MaxTokens = req.Model, req.MaxTokens
	system, err := anthropicText(req.System)
	if err != nil {
		return fmt.Errorf("system: %w", err)
	}
	c.System = system
	for i, t := range req.Tools {
		if t.Name == "" || !isObject(t.InputSchema) {
			return fmt.Errorf("tools.%d: name and input_schema are required", i)
		}
		c.Tools = append(c.Tools, t.Name)
	}
	for i, m := range req.Messages {
		msg, err := anthropicMsg(m.Role, m.Content)
		if err != nil {
			return fmt.Errorf("messages.%d: %w", i, err)
		}
		c.Messages = append(c.Messages, msg)
	}
	return checkPairs(c.Messages)
}

func anthropicMsg(role string, content json.RawMessage) (Msg, error) {
	if role != "user" && role != "assistant" {
		return Msg{}, fmt.Errorf("role: must be user or assistant, not %q", role)
	}
	msg := Msg{Role: role}
	var s string
	if json.Unmarshal(content, &s) == nil {
		msg.Text = s
		return msg, nil
	}
	var blocks []anthropicBlock
	if err := json.Unmarshal(content, &blocks); err != nil {
		return Msg{}, fmt.Errorf("content: want a string or an array of blocks: %w", err)
	}
	var texts []string
	for j, b := range blocks {
		switch {
		case b.Type == "text" && b.Text != "":
			texts = append(texts, b.Text)
		case b.Type == "text":
			return Msg{}, fmt.Errorf("content.%d: text content blocks must be non-empty", j)
		case b.Type == "tool_use" && role == "assistant":
			if b.ID == "" || b.Name == "" || !isObject(b.Input) {
				return Msg{}, fmt.Errorf("content.%d: tool_use needs an id, a name and an object input", j)
			}
			msg.Calls = append(msg.Calls, Call{ID: b.ID, Name: b.Name, Input: b.Input})
		case b.Type == "tool_result" && role == "user":
			text, err := anthropicText(b.Content)
			if err != nil || b.ToolUseID == "" {
				return Msg{}, fmt.Errorf("content.%d: tool_result needs a tool_use_id and text content", j)
			}
			msg.Results = append(msg.Results, Result{CallID: b.ToolUseID, Content: text, IsError: b.IsError})
		default:
			return Msg{}, fmt.Errorf("content.%d: unexpected %q block in a %s message", j, b.Type, role)
		}
	}
	msg.Text = strings.Join(texts, "\n\n")
	return msg, nil
}

// anthropicText reads a string or an array of text blocks, or nothing.
func anthropicText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var blocks []anthropicBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", fmt.Errorf("want a string or an array of text blocks: %w", err)
	}
	var texts []string
	for _, b := range blocks {
		if b.Type != "text" {
			return "", fmt.Errorf("unexpected %q block", b.Type)
		}
		texts = append(texts, b.Text)
	}
	return strings.Join(texts, "\n\n"), nil
}

func replyAnthropic(c Conversation, t Turn, u usage) (any, error) {
	content := []anthropicBlock{}
	if t.Text != "" {
		content = append(content, anthropicBlock{Type: "text", Text: t.Text})
	}
	args := make([][]byte, len(t.Calls))
	for i, call := range t.Calls {
		raw, err := rawInput(call.Input)
		if err != nil {
			return nil, fmt.Errorf("call %d: %w", i, err)
		}
		if !json.Valid(raw) {
			raw, _ = json.Marshal(string(raw)) // a string always marshals
		}
		args[i] = raw
		content = append(content, anthropicBlock{Type: "tool_use", ID: callID(call, "toolu_"), Name: call.Name, Input: raw})
	}
	stop := "end_turn"
	if len(t.Calls) > 0 {
		stop = "tool_use"
	}
	return map[string]any{
		"id":            "msg_" + rand.Text(),
		"type":          "message",
		"role":          "assistant",
		"model":         c.Model,
		"content":       content,
		"stop_reason":   stop,
		"stop_sequence": nil,
		"usage": map[string]int{
			"input_tokens":                u.input - u.read - u.written,
			"cache_read_input_tokens":     u.read,
			"cache_creation_input_tokens": u.written,
			"output_tokens":               outputTokens(t.Text, args, t.Calls),
		},
	}, nil
}

func anthropicError(status int, msg string) any {
	typ := "api_error"
	switch status {
	case 400:
		typ = "invalid_request_error"
	case 401:
		typ = "authentication_error"
	case 403:
		typ = "permission_error"
	case 404:
		typ = "not_found_error"
	case 413:
		typ = "request_too_large"
	case 429:
		typ = "rate_limit_error"
	case 529:
		typ = "overloaded_error"
	}
	return map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}}
}

func isObject(raw json.RawMessage) bool {
	// Decoded from a request that json.Unmarshal checked whole: valid.
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '{'
}
