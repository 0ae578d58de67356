package modeltest

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

var openAIProtocol = protocol{
	name:   "openai",
	decode: decodeOpenAI,
	bill: func(c *promptCache, body []byte) usage {
		segs, key := openAISegments(body)
		return c.openAI(key, segs)
	},
	reply:           replyOpenAI,
	errorBody:       openAIError,
	requestIDHeader: "x-request-id",
}

// The Chat Completions request, as far as the fake reads it.
type openAIRequest struct {
	Model               string          `json:"model"`
	Messages            []openAIMessage `json:"messages"`
	MaxTokens           int             `json:"max_tokens"`
	MaxCompletionTokens int             `json:"max_completion_tokens"`
	Tools               []struct {
		Type     string `json:"type"`
		Function struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
}

type openAIMessage struct {
	Role string `json:"role"`
	// Content is a string, null, or an array of parts.
	Content    json.RawMessage  `json:"content"`
	ToolCalls  []openAIToolCall `json:"tool_calls,omitempty"`
	ToolCallID string           `json:"tool_call_id,omitempty"`
}

type openAIToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

func decodeOpenAI(body []byte, c *Conversation) error {
	var req openAIRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return fmt.Errorf("decode request: %w", err)
	}
	switch {
	case req.Model == "":
		return fmt.Errorf("you must provide a model parameter")
	case len(req.Messages) == 0:
		return fmt.Errorf("messages: must not be empty")
	}
	c.Model = req.Model
	c.MaxTokens = max(req.MaxTokens, req.MaxCompletionTokens)
	for i, t := range req.Tools {
		if t.Type != "function" || t.Function.Name == "" || !isObject(t.Function.Parameters) {
			return fmt.Errorf("tools[%d]: want type function with a name and object parameters", i)
		}
		c.Tools = append(c.Tools, t.Function.Name)
	}
	var system []string
	for i, m := range req.Messages {
		text, err := openAIText(m.Content)
		if err != nil {
			return fmt.Errorf("messages[%d].content: %w", i, err)
		}
		switch m.Role {
		case "system", "developer":
			system = append(system, text)
		case "user":
			c.Messages = append(c.Messages, Msg{Role: "user", Text: text})
		case "assistant":
			msg := Msg{Role: "assistant", Text: text}
			for j, tc := range m.ToolCalls {
				if tc.ID == "" || tc.Type != "function" || tc.Function.Name == "" {
					return fmt.Errorf("messages[%d].tool_calls[%d]: want an id, type function and a name", i, j)
				}
				var input any = tc.Function.Arguments
				if json.Valid([]byte(tc.Function.Arguments)) {
					input = json.RawMessage(tc.Function.Arguments)
				}
				msg.Calls = append(msg.Calls, Call{ID: tc.ID, Name: tc.Function.Name, Input: input})
			}
			c.Messages = append(c.Messages, msg)
		case "tool":
			if m.ToolCallID == "" {
				return fmt.Errorf("messages[%d]: tool_call_id is required in a tool message", i)
			}
			r := Result{CallID: m.ToolCallID, Content: text, IsError: strings.HasPrefix(text, "Error: ")}
			c.Messages = append(c.Messages, Msg{Role: "tool", Results: []Result{r}})
		default:
			return fmt.Errorf("messages[%d].role: unknown role %q", i, m.Role)
		}
	}
	c.System = strings.Join(system, "\n\n")
	return checkPairs(c.Messages)
}

// openAIText reads a string, null, or an array of text parts.
func openAIText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("want a string or an array of parts: %w", err)
	}
	var texts []string
	for _, p := range parts {
		if p.Type != "text" {
			return "", fmt.Errorf("unexpected %q part", p.Type)
		}
		texts = append(texts, p.Text)
	}
	return strings.Join(texts, "\n\n"), nil
}

func replyOpenAI(c Conversation, t Turn, u usage) (any, error) {
	var calls []openAIToolCall
	args := make([][]byte, len(t.Calls))
	for i, call := range t.Calls {
		raw, err := rawInput(call.Input)
		if err != nil {
			return nil, fmt.Errorf("call %d: %w", i, err)
		}
		args[i] = raw
		tc := openAIToolCall{ID: callID(call, "call_"), Type: "function"}
		tc.Function.Name = call.Name
		tc.Function.Arguments = string(raw)
		calls = append(calls, tc)
	}
	var content *string
	if t.Text != "" || len(calls) == 0 {
		content = &t.Text
	}
	finish := "stop"
	if len(calls) > 0 {
		finish = "tool_calls"
	}
	message := map[string]any{"role": "assistant", "content": content, "refusal": nil}
	if len(calls) > 0 {
		message["tool_calls"] = calls
	}
	output := outputTokens(t.Text, args, t.Calls)
	return map[string]any{
		"id":      "chatcmpl-" + rand.Text(),
		"object":  "chat.completion",
		"created": time.Now().Unix(),
		"model":   c.Model,
		"choices": []map[string]any{{
			"index":         0,
			"message":       message,
			"finish_reason": finish,
		}},
		"usage": map[string]any{
			"prompt_tokens":         u.input,
			"completion_tokens":     output,
			"total_tokens":          u.input + output,
			"prompt_tokens_details": map[string]int{"cached_tokens": u.read},
		},
	}, nil
}

func openAIError(status int, msg string) any {
	typ, code := "server_error", any(nil)
	switch {
	case status == 401:
		typ, code = "invalid_request_error", "invalid_api_key"
	case status == 404:
		typ, code = "invalid_request_error", "model_not_found"
	case status == 429:
		typ, code = "requests", "rate_limit_exceeded"
	case status < 500:
		typ = "invalid_request_error"
	}
	return map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": code}}
}
