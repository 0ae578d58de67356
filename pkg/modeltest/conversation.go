package modeltest

import (
	"encoding/json"
	"fmt"
	"time"
)

// Turn is what the fake model says next: text, tool calls, or both.
type Turn struct {
	Text  string
	Calls []Call
	// Thinking, on the Anthropic wire and when the request enables
	// extended thinking, comes first as a thinking block whose signature
	// the server can verify. A later request that sends it back altered,
	// or, with thinking enabled, leaves it out of the assistant message
	// with the turn's tool calls, is rejected with 400, as the API does.
	// Otherwise it is not sent.
	Thinking string
	// Refusal makes the model decline: OpenAI sends it as the message's
	// refusal (content null), Anthropic as its text with stop_reason
	// "refusal". Text and Calls are then not sent.
	Refusal string
	// StopReason, when set, replaces the stop_reason (Anthropic) or
	// finish_reason (OpenAI) the turn would have, such as "max_tokens"
	// or "length"; "refusal" with no text makes Anthropic's bare refusal.
	StopReason string
	// Hold, when set, pauses a streamed reply right after its first text
	// delta (or, with no text, its first delta of any kind) is flushed,
	// until Hold is closed or the request ends; a reply that is not
	// streamed waits before it is written.
	Hold <-chan struct{}
	// OnFirstDelta, when set, is called right after the first text delta
	// (or, with no text, the first delta) of a streamed reply is flushed,
	// before Hold. A reply that is not streamed does not call it.
	OnFirstDelta func()
}

// Call is a tool call.
//
// In a [Turn], Input is marshalled to JSON, except that a [json.RawMessage],
// a []byte or a string is taken as raw JSON and sent as it is (nil sends
// {}). An OpenAI reply carries it verbatim as the arguments string, so a
// string that is not valid JSON makes malformed arguments; an Anthropic
// reply cannot, and sends such a string as a JSON string instead. An empty
// ID gets a fresh unique one (toolu_… or call_…).
//
// In a [Conversation], ID is the call's ID and Input is a [json.RawMessage],
// or, for OpenAI arguments that are not valid JSON, the raw string.
type Call struct {
	ID    string
	Name  string
	Input any
}

// Result is the result of a tool call as the client sent it back. OpenAI's
// API has no is_error, so for it IsError reports whether Content starts
// with "Error: ", the prefix corral's client adds.
type Result struct {
	CallID  string
	Content string
	IsError bool
}

// Msg is one message of a [Conversation], provider-neutral. Role is "user",
// "assistant" or "tool" (OpenAI sends each tool result as its own "tool"
// message; Anthropic sends them in a "user" message). Text joins the text
// parts with blank lines.
type Msg struct {
	Role    string
	Text    string
	Calls   []Call
	Results []Result
	// Thinking joins the text of an Anthropic assistant message's thinking
	// blocks.
	Thinking string
}

// Conversation is a request as the fake saw it, decoded from the wire.
type Conversation struct {
	// Provider is "anthropic" or "openai".
	Provider string
	Model    string
	System   string
	// APIKey is the x-api-key header, or the bearer token of Authorization.
	APIKey string
	// MaxTokens is max_tokens (or OpenAI's max_completion_tokens); zero
	// when the request has none.
	MaxTokens int
	// Tools are the names of the tools offered, in order.
	Tools []string
	// Messages are the user, assistant and tool messages in order; system
	// messages go to System.
	Messages []Msg
	// Body is the request body as it came, for byte-for-byte comparisons.
	Body []byte
	// Stream reports that the request asked for a streamed response.
	Stream bool
	// Thinking is Anthropic's thinking budget_tokens, when the request
	// enables extended thinking.
	Thinking int
	// ReasoningEffort is OpenAI's reasoning_effort.
	ReasoningEffort string
	// CacheTTL is the longest lifetime the Anthropic cache breakpoints ask
	// for ("1h", "5m", or "" when they name none: the API's five
	// minutes), or OpenAI's prompt_cache_retention.
	CacheTTL string
	// Received is when the request had come whole, before the fake
	// decoded it: a provider's own time over a request starts there.
	Received time.Time
}

// Script decides the next turn from the conversation so far. Returning an
// error makes the server answer HTTP 500 with the error's message (which
// clients retry, calling the script again). The server calls its script
// for one request at a time.
type Script func(c Conversation) (Turn, error)

// Results returns the tool results of the messages after the last
// assistant message: what the tools answered to the model's last calls.
func Results(c Conversation) []Result {
	i := len(c.Messages)
	for i > 0 && c.Messages[i-1].Role != "assistant" {
		i--
	}
	var out []Result
	for _, m := range c.Messages[i:] {
		out = append(out, m.Results...)
	}
	return out
}

// Turns returns the number of assistant messages in c: how many times the
// model has answered so far.
func Turns(c Conversation) int {
	n := 0
	for _, m := range c.Messages {
		if m.Role == "assistant" {
			n++
		}
	}
	return n
}

// checkPairs enforces the rule both APIs share: the tool calls of an
// assistant message are answered, each exactly once, by the results right
// after it (the next user message, or the run of tool messages), and no
// result answers anything else.
func checkPairs(msgs []Msg) error {
	for i, m := range msgs {
		if m.Role == "assistant" {
			continue
		}
		if len(m.Results) == 0 {
			continue
		}
		j := i - 1
		for j >= 0 && msgs[j].Role == "tool" {
			j--
		}
		if j < 0 || msgs[j].Role != "assistant" || (m.Role == "user" && j != i-1) {
			return fmt.Errorf("messages.%d: tool results must directly follow the assistant message with the tool calls", i)
		}
		if !hasCall(msgs[j].Calls, m.Results) {
			return fmt.Errorf("messages.%d: a tool result names a tool call id that is not in the previous assistant message", i)
		}
	}
	for i, m := range msgs {
		if m.Role != "assistant" || len(m.Calls) == 0 || i == len(msgs)-1 {
			continue
		}
		answered := map[string]int{}
		for j := i + 1; j < len(msgs) && msgs[j].Role != "assistant"; j++ {
			for _, r := range msgs[j].Results {
				answered[r.CallID]++
			}
			if msgs[j].Role == "user" {
				break
			}
		}
		for _, c := range m.Calls {
			if answered[c.ID] != 1 {
				return fmt.Errorf("messages.%d: tool call %s must have exactly one result right after it, has %d", i, c.ID, answered[c.ID])
			}
		}
	}
	return nil
}

func hasCall(calls []Call, results []Result) bool {
	for _, r := range results {
		found := false
		for _, c := range calls {
			found = found || c.ID == r.CallID
		}
		if !found {
			return false
		}
	}
	return true
}

// rawInput renders a [Call]'s Input as JSON text, or raw text for a string.
func rawInput(in any) ([]byte, error) {
	switch v := in.(type) {
	case nil:
		return []byte(`{}`), nil
	case json.RawMessage:
		return v, nil
	case []byte:
		return v, nil
	case string:
		return []byte(v), nil
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("marshal input: %w", err)
		}
		return b, nil
	}
}
