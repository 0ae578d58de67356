// Package model talks to model providers — the Anthropic Messages API and the
// OpenAI Chat Completions API (which also covers Ollama, vLLM, llama.cpp
// server and most gateways) — through one provider-neutral [Client].
package model

import (
	"context"
	"encoding/json"
	"log/slog"
	"math"

	"corral.dev/pkg/tool"
)

// Role is who wrote a [Message].
type Role string

// Roles of a conversation. Tool results travel in user messages, as in the
// Anthropic Messages API; the OpenAI client turns them into "tool" messages.
const (
	User      Role = "user"
	Assistant Role = "assistant"
)

// Block types.
const (
	TextBlock       = "text"
	ToolUseBlock    = "tool_use"
	ToolResultBlock = "tool_result"
	// ThinkingBlock and RedactedThinkingBlock are Anthropic's extended
	// thinking, kept in the log and sent back exactly, signature and all,
	// as the API requires across tool-use turns.
	ThinkingBlock         = "thinking"
	RedactedThinkingBlock = "redacted_thinking"
)

// Block is one piece of a message's content: text, a tool call the model made
// (tool_use), or the result of one (tool_result).
type Block struct {
	Type string `json:"type"`
	// Text is set for text blocks.
	Text string `json:"text,omitempty"`
	// ID, Name and Input are set for tool_use blocks. ID is the provider's.
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
	// ToolUseID, Content and IsError are set for tool_result blocks.
	ToolUseID string `json:"tool_use_id,omitempty"`
	Content   string `json:"content,omitempty"`
	IsError   bool   `json:"is_error,omitempty"`
	// Thinking and Signature are set for thinking blocks, Data for
	// redacted_thinking blocks: opaque, sent back byte for byte.
	Thinking  string `json:"thinking,omitempty"`
	Signature string `json:"signature,omitempty"`
	Data      string `json:"data,omitempty"`
}

// Message is one turn of the conversation.
type Message struct {
	Role    Role    `json:"role"`
	Content []Block `json:"content"`
}

// Request is what the harness asks of a model.
type Request struct {
	// Model is the provider's model name, without the "openai:" or
	// "anthropic:" prefix.
	Model     string
	System    string
	Messages  []Message
	Tools     []tool.Spec
	MaxTokens int
	// CacheKey, when set, asks the provider to cache the prompt's prefix
	// for the requests that share it (a session's): Anthropic's requests
	// carry cache_control breakpoints, OpenAI's a prompt_cache_key. The
	// prompt must then be byte-stable across a session's turns up to its
	// newest messages (tools, system prompt, conversation, in that order).
	CacheKey string
	// CacheTTL, with CacheKey, asks for the provider's longer cache
	// lifetime where it has one ("1h": Anthropic's one-hour breakpoints,
	// OpenAI's extended retention); "" is the provider's default.
	CacheTTL string
	// Thinking, when above zero, is the budget in tokens of Anthropic's
	// extended thinking (at least the API's 1,024; the request's
	// max_tokens is the budget plus MaxTokens, so that MaxTokens stays
	// the answer's own); OpenAI's reasoning models take ReasoningEffort
	// ("minimal", "low", "medium", "high") instead.
	Thinking        int
	ReasoningEffort string
	// OnDelta, when set, hears each piece of the response as it streams
	// in, in order, on the goroutine that called Complete. A new Attempt
	// voids the deltas of the attempts before it (a stream cut and asked
	// again). The response Complete returns is the durable one.
	OnDelta func(Delta)
}

// Delta kinds.
const (
	DeltaText     = "text"
	DeltaThinking = "thinking"
	// DeltaToolUse is part of a tool call's input JSON; the first delta
	// of a call has its Name and ID.
	DeltaToolUse = "tool_use"
)

// Delta is a piece of a streamed response.
type Delta struct {
	// Attempt counts the requests Complete made, from 1.
	Attempt int
	// Index is the content block's index in the response.
	Index int
	Kind  string
	// Text is the text, thinking, or partial input JSON the block adds.
	Text string
	// ID and Name name a tool call, on its first delta.
	ID, Name string
}

// Usage counts the tokens of one response.
type Usage struct {
	// InputTokens counts every input token, cached or not.
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
	// CacheReadTokens and CacheWriteTokens are those of InputTokens read
	// from the provider's prompt cache, and written to it, which it bills
	// at their own prices.
	CacheReadTokens  int `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens int `json:"cache_write_tokens,omitempty"`
	// CacheWriteLongTokens are those of CacheWriteTokens written with the
	// longer lifetime ([Request.CacheTTL] "1h"), which Anthropic bills
	// higher.
	CacheWriteLongTokens int `json:"cache_write_long_tokens,omitempty"`
}

// Add adds v's counts to u, saturating as [tokens] does.
func (u *Usage) Add(v Usage) {
	u.InputTokens = tokens(u.InputTokens, v.InputTokens)
	u.OutputTokens = tokens(u.OutputTokens, v.OutputTokens)
	u.CacheReadTokens = tokens(u.CacheReadTokens, v.CacheReadTokens)
	u.CacheWriteTokens = tokens(u.CacheWriteTokens, v.CacheWriteTokens)
	u.CacheWriteLongTokens = tokens(u.CacheWriteLongTokens, v.CacheWriteLongTokens)
}

// tokens adds a response's token counts as budgets may: a count below zero
// (a provider's bug, or a hostile endpoint's way to pay back spending)
// counts none, and the sum saturates rather than wraps.
func tokens(counts ...int) int {
	total := 0
	for _, n := range counts {
		if n <= 0 {
			continue
		}
		if n > math.MaxInt-total {
			return math.MaxInt
		}
		total += n
	}
	return total
}

// Response is the model's answer to one [Request].
type Response struct {
	Content []Block `json:"content"`
	// StopReason is the provider's own word for why the model stopped
	// ("end_turn", "tool_use", "stop", "tool_calls", "max_tokens", "length",
	// "refusal", "content_filter").
	StopReason string `json:"stop_reason"`
	// Refusal is the model's explanation when it declined to answer
	// (OpenAI's refusal, or Anthropic's text with stop reason "refusal").
	Refusal string `json:"refusal,omitempty"`
	Usage   Usage  `json:"usage"`
	// Model is the model that answered, as the provider names it.
	Model string `json:"model"`
}

// ToolUses returns the response's tool_use blocks in order.
func (r Response) ToolUses() []Block {
	var out []Block
	for _, b := range r.Content {
		if b.Type == ToolUseBlock {
			out = append(out, b)
		}
	}
	return out
}

// Text returns the response's text blocks joined by blank lines.
func (r Response) Text() string {
	var s string
	for _, b := range r.Content {
		if b.Type != TextBlock || b.Text == "" {
			continue
		}
		if s != "" {
			s += "\n\n"
		}
		s += b.Text
	}
	return s
}

// Client sends one request to a model and returns its response.
type Client interface {
	// Complete asks the model once. It retries 429 and 5xx answers itself,
	// honouring retry-after, within ctx. Errors that retrying cannot fix
	// (bad key, unknown model, malformed request) wrap [ErrPermanent].
	Complete(ctx context.Context, req Request) (Response, error)
}

// Secret is a credential. It never appears in logs or formatted output.
type Secret string

// LogValue implements [slog.LogValuer].
func (Secret) LogValue() slog.Value { return slog.StringValue("REDACTED") }

// String implements [fmt.Stringer].
func (Secret) String() string { return "REDACTED" }

// GoString implements [fmt.GoStringer], so %#v redacts it too.
func (Secret) GoString() string { return `"REDACTED"` }
