package modeltest

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

var openAIProtocol = protocol{
	name:   "openai",
	decode: decodeOpenAI,
	segments: func(body []byte) ([]segment, string) {
		return openAISegments(body)
	},
	bill: func(c *promptCache, key string, segs []segment) usage {
		return c.openAI(key, segs)
	},
	tooLong: func(n, window int) *rejection {
		return &rejection{
			status: 400, param: "messages", code: "context_length_exceeded",
			msg: fmt.Sprintf("This model's maximum context length is %d tokens. However, your messages resulted in %d tokens. Please reduce the length of the messages.", window, n),
		}
	},
	reply:           replyOpenAI,
	errorBody:       openAIError,
	errorEvent:      openAIErrorEvent,
	requestIDHeader: "x-request-id",
}

// The Chat Completions request, as far as the fake reads it.
type openAIRequest struct {
	Model               string          `json:"model"`
	Messages            []openAIMessage `json:"messages"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens int             `json:"max_completion_tokens"`
	Tools               []struct {
		Type     string `json:"type"`
		Function struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
	Stream        bool `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	ReasoningEffort      string `json:"reasoning_effort"`
	PromptCacheRetention string `json:"prompt_cache_retention"`
}

// reasoningModel matches the names of the models that take
// max_completion_tokens and refuse max_tokens.
var reasoningModel = regexp.MustCompile(`^(gpt-5|o[134])([-.]|$)`)

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

func decodeOpenAI(_ *Server, body []byte, c *Conversation) error {
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
	if req.MaxTokens != nil && reasoningModel.MatchString(req.Model) {
		return &rejection{
			status: 400, param: "max_tokens", code: "unsupported_parameter",
			msg: "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
		}
	}
	switch req.ReasoningEffort {
	case "", "none", "minimal", "low", "medium", "high", "xhigh":
	default:
		return &rejection{
			status: 400, param: "reasoning_effort", code: "invalid_value",
			msg: fmt.Sprintf("Invalid value: '%s'. Supported values are: 'minimal', 'low', 'medium', and 'high'.", req.ReasoningEffort),
		}
	}
	switch req.PromptCacheRetention {
	case "", "in-memory", "24h":
	default:
		return &rejection{
			status: 400, param: "prompt_cache_retention", code: "invalid_value",
			msg: fmt.Sprintf("Invalid value: '%s'. Supported values are: 'in-memory' and '24h'.", req.PromptCacheRetention),
		}
	}
	if req.StreamOptions != nil && !req.Stream {
		return &rejection{status: 400, param: "stream_options", msg: "The 'stream_options' parameter is only allowed when 'stream' is enabled."}
	}
	c.Model, c.Stream = req.Model, req.Stream
	c.MaxTokens = req.MaxCompletionTokens
	if req.MaxTokens != nil {
		c.MaxTokens = max(*req.MaxTokens, c.MaxTokens)
	}
	c.ReasoningEffort, c.CacheTTL = req.ReasoningEffort, req.PromptCacheRetention
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
