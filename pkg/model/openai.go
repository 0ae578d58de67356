package model

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"corral.dev/pkg/tool"
)

const defaultOpenAIURL = "https://api.openai.com/v1"

// openAIClient talks to the OpenAI Chat Completions API and the servers that
// copy it.
type openAIClient struct {
	p *poster
	// legacyMaxTokens sends max_tokens rather than max_completion_tokens.
	legacyMaxTokens bool
}

// NewOpenAI returns a [Client] for the OpenAI Chat Completions API and
// compatible servers (Ollama, vLLM, llama.cpp, gateways). It posts to
// cfg.BaseURL (default https://api.openai.com/v1), trailing "/" removed,
// followed by "/chat/completions". A base URL with no path at all gets "/v1"
// first, so "http://127.0.0.1:11434" (Ollama) reaches
// http://127.0.0.1:11434/v1/chat/completions; any other path is kept as
// given, so gateways that serve the API elsewhere ("/api/v1",
// "/v1beta/openai") work too. The API key, when set, is sent as a bearer
// token.
//
// The API has no is_error on tool results, so a failed result's content is
// sent prefixed with "Error: ". MaxTokens is sent, only when a request sets
// it, as max_completion_tokens, or as max_tokens under
// cfg.MaxTokensField [MaxTokensLegacy]. ReasoningEffort is sent as
// reasoning_effort; CacheTTL "1h", with a CacheKey, as
// prompt_cache_retention "24h". A refusal comes back as the response's
// Refusal and as its text.
//
// Every request streams its response ("stream": true, with the usage
// asked for in the last chunk), which is read as it arrives:
// [Request.OnDelta] hears each piece, and a stream cut before its
// "[DONE]", or ended by an error chunk of a server or rate-limit error,
// is asked again like a 5xx. A server that answers JSON instead is read
// as such.
func NewOpenAI(cfg Config) Client {
	key := cfg.APIKey
	return &openAIClient{
		p: newPoster("openai", openAIEndpoint(cfg.BaseURL), cfg, func(h http.Header) {
			if key != "" {
				h.Set("authorization", "Bearer "+string(key))
			}
		}),
		legacyMaxTokens: cfg.MaxTokensField == MaxTokensLegacy,
	}
}

func openAIEndpoint(base string) string {
	if base == "" {
		base = defaultOpenAIURL
	}
	base = strings.TrimRight(base, "/")
	if u, err := url.Parse(base); err == nil && u.Path == "" && u.RawQuery == "" {
		base += "/v1"
	}
	return base + "/chat/completions"
}

type openAIRequest struct {
	Model               string          `json:"model"`
	Messages            []openAIMessage `json:"messages"`
	MaxTokens           int             `json:"max_tokens,omitempty"`
	MaxCompletionTokens int             `json:"max_completion_tokens,omitempty"`
	ReasoningEffort     string          `json:"reasoning_effort,omitempty"`
	// PromptCacheKey routes the requests that share it to where their
	// common prefix is cached (OpenAI caches prefixes of 1,024 tokens and
	// more by itself; the key keeps a session's together).
	// PromptCacheRetention "24h" keeps the prefix for a day rather than
	// minutes.
	PromptCacheKey       string               `json:"prompt_cache_key,omitempty"`
	PromptCacheRetention string               `json:"prompt_cache_retention,omitempty"`
	Stream               bool                 `json:"stream,omitempty"`
	StreamOptions        *openAIStreamOptions `json:"stream_options,omitempty"`
}

type openAIStreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// maxPromptCacheKey is the longest prompt_cache_key the API takes.
const maxPromptCacheKey = 64

// promptCacheKey returns key as the API takes it: as it is, or its
// SHA-256 in hex when it is too long, which is as stable and as distinct.
func promptCacheKey(key string) string {
	if len(key) <= maxPromptCacheKey {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

type openAIMessage struct {
	Role string `json:"role"`
	// Content is a string, or null in an assistant message with only tool
	// calls.
	Content    *string          `json:"content"`
	ToolCalls  []openAIToolCall `json:"tool_calls,omitempty"`
	ToolCallID string           `json:"tool_call_id,omitempty"`
	// Refusal is set, in responses, when the model declines to answer.
	Refusal string `json:"refusal,omitempty"`
}

type openAIToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type openAITool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

type openAIResponse struct {
	Model   string         `json:"model"`
	Choices []openAIChoice `json:"choices"`
	Usage   openAIUsage    `json:"usage"`
}

type openAIChoice struct {
	Message      openAIMessage `json:"message"`
	FinishReason string        `json:"finish_reason"`
}

type openAIUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// openAIWire reads the Chat Completions API's responses.
var openAIWire = wire{json: decodeOpenAI, stream: decodeOpenAIStream}

// Complete implements [Client]. A tool call whose arguments are not valid
// JSON comes back with Input holding them as a JSON string, so the caller
// can tell the model its arguments were malformed.
func (c *openAIClient) Complete(ctx context.Context, req Request) (Response, error) {
	body, err := encodeOpenAI(req, c.legacyMaxTokens, !c.p.noStream)
	if err != nil {
		return Response{}, fmt.Errorf("openai: %w: %w", ErrPermanent, err)
	}
	return c.p.post(ctx, body, openAIWire, req.OnDelta)
}

// decodeOpenAI reads a Chat Completions response that came whole.
func decodeOpenAI(data []byte) (Response, error) {
	var w openAIResponse
	if err := json.Unmarshal(data, &w); err != nil {
		return Response{}, fmt.Errorf("openai: decode response: %w", err)
	}
	return w.response()
}

// response turns the API's response, whole or assembled from its stream,
// into ours.
func (w *openAIResponse) response() (Response, error) {
	if len(w.Choices) == 0 {
		return Response{}, fmt.Errorf("openai: response has no choices")
	}
	choice := w.Choices[0]
	resp := Response{
		StopReason: choice.FinishReason,
		Model:      w.Model,
		Usage: Usage{
			InputTokens:  tokens(w.Usage.PromptTokens),
			OutputTokens: tokens(w.Usage.CompletionTokens),
			// Of the prompt's, never more: a count that says otherwise
			// would price tokens the prompt did not have.
			CacheReadTokens: min(tokens(w.Usage.PromptTokensDetails.CachedTokens), tokens(w.Usage.PromptTokens)),
		},
	}
	msg := choice.Message
	switch {
	case msg.Content != nil && *msg.Content != "":
		resp.Content = append(resp.Content, Block{Type: TextBlock, Text: *msg.Content})
	case msg.Refusal != "":
		resp.Content = append(resp.Content, Block{Type: TextBlock, Text: msg.Refusal})
	}
	resp.Refusal = msg.Refusal
	for i, tc := range msg.ToolCalls {
		id := tc.ID
		if id == "" {
			// Some local servers send no IDs; results still need one to name.
			id = "call_" + strconv.Itoa(i)
		}
		resp.Content = append(resp.Content, Block{Type: ToolUseBlock, ID: id, Name: tc.Function.Name, Input: argumentsInput(tc.Function.Arguments)})
	}
	return resp, nil
}

// argumentsInput turns a tool call's arguments string into a tool_use
// Input: the JSON itself when valid and not a string, {} when empty, else
// the string as a JSON string value (a JSON string among the arguments is
// kept whole that way too, so that [inputArguments] gives it back).
func argumentsInput(args string) json.RawMessage {
	trimmed := strings.TrimSpace(args)
	if trimmed == "" {
		return json.RawMessage(`{}`)
	}
	if trimmed[0] != '"' && json.Valid([]byte(trimmed)) {
		return json.RawMessage(trimmed)
	}
	s, _ := json.Marshal(args) // a string always marshals
	return s
}

// inputArguments is the inverse of [argumentsInput]: it gives a tool_use
// Input back as the arguments string, restoring malformed arguments as the
// model wrote them.
func inputArguments(input json.RawMessage) string {
	trimmed := bytes.TrimSpace(input)
	if len(trimmed) == 0 {
		return "{}"
	}
	var s string
	if trimmed[0] == '"' && json.Unmarshal(trimmed, &s) == nil {
		return s
	}
	return string(trimmed)
}

func encodeOpenAI(req Request, legacyMaxTokens, stream bool) ([]byte, error) {
	w := openAIRequest{
		Model:           req.Model,
		Messages:        []openAIMessage{},
		ReasoningEffort: req.ReasoningEffort,
		PromptCacheKey:  promptCacheKey(req.CacheKey),
		Stream:          stream,
	}
	if stream {
		w.StreamOptions = &openAIStreamOptions{IncludeUsage: true}
	}
	if legacyMaxTokens {
		w.MaxTokens = max(req.MaxTokens, 0)
	} else {
		w.MaxCompletionTokens = max(req.MaxTokens, 0)
	}
	if req.CacheKey != "" && req.CacheTTL == "1h" {
		w.PromptCacheRetention = "24h"
	}
	if req.System != "" {
		w.Messages = append(w.Messages, openAIMessage{Role: "system", Content: &req.System})
	}
	for i, m := range req.Messages {
		var texts []string
		var calls []openAIToolCall
		var results []openAIMessage
		for _, b := range m.Content {
			switch b.Type {
			case TextBlock:
				texts = append(texts, b.Text)
			case ToolUseBlock:
				tc := openAIToolCall{ID: b.ID, Type: "function"}
				tc.Function.Name = b.Name
				tc.Function.Arguments = inputArguments(b.Input)
				calls = append(calls, tc)
			case ToolResultBlock:
				content := b.Content
				if b.IsError {
					content = "Error: " + content
				}
				results = append(results, openAIMessage{Role: "tool", ToolCallID: b.ToolUseID, Content: &content})
			case ThinkingBlock, RedactedThinkingBlock:
				// Anthropic's alone, and its to check: not part of this
				// API's conversation.
			default:
				return nil, fmt.Errorf("message %d: unknown block type %q", i, b.Type)
			}
		}
		text := strings.Join(texts, "\n\n")
		switch m.Role {
		case User:
			if len(calls) > 0 {
				return nil, fmt.Errorf("message %d: a user message cannot hold tool calls", i)
			}
			// Tool messages must directly follow the assistant's tool calls,
			// so they go before any text the user message adds.
			w.Messages = append(w.Messages, results...)
			if len(texts) > 0 || len(results) == 0 {
				w.Messages = append(w.Messages, openAIMessage{Role: "user", Content: &text})
			}
		case Assistant:
			if len(results) > 0 {
				return nil, fmt.Errorf("message %d: an assistant message cannot hold tool results", i)
			}
			am := openAIMessage{Role: "assistant", ToolCalls: calls}
			if text != "" || len(calls) == 0 {
				am.Content = &text
			}
			w.Messages = append(w.Messages, am)
		default:
			return nil, fmt.Errorf("message %d: unknown role %q", i, m.Role)
		}
	}
	tools, err := openAITools.encode(req.Tools, func(t tool.Spec) any {
		wt := openAITool{Type: "function"}
		wt.Function.Name = t.Name
		wt.Function.Description = t.Description
		wt.Function.Parameters = schemaOrEmpty(t.InputSchema)
		return wt
	})
	if err != nil {
		return nil, err
	}
	return marshalWithTools(w, tools)
}

var openAITools toolsCache
