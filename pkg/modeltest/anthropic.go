package modeltest

import (
	"bytes"
	"cmp"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
)

var anthropicProtocol = protocol{
	name:     "anthropic",
	decode:   decodeAnthropic,
	segments: func(body []byte) ([]segment, string) { return anthropicSegments(body), "" },
	bill: func(c *promptCache, _ string, segs []segment) usage {
		return c.anthropic(segs)
	},
	tooLong: func(n, window int) *rejection {
		return &rejection{status: 400, msg: fmt.Sprintf("prompt is too long: %d tokens > %d maximum", n, window)}
	},
	reply:           replyAnthropic,
	errorBody:       anthropicError,
	errorEvent:      anthropicErrorEvent,
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
		Name         string          `json:"name"`
		InputSchema  json.RawMessage `json:"input_schema"`
		CacheControl *cacheControl   `json:"cache_control"`
	} `json:"tools"`
	Stream   bool `json:"stream"`
	Thinking *struct {
		Type         string `json:"type"`
		BudgetTokens int    `json:"budget_tokens"`
	} `json:"thinking"`
}

// cacheControl is a cache breakpoint.
type cacheControl struct {
	Type string `json:"type"`
	TTL  string `json:"ttl,omitempty"`
}

type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	// Content is a string or an array of text blocks.
	Content      json.RawMessage `json:"content,omitempty"`
	IsError      bool            `json:"is_error,omitempty"`
	Thinking     *string         `json:"thinking,omitempty"`
	Signature    *string         `json:"signature,omitempty"`
	Data         *string         `json:"data,omitempty"`
	CacheControl *cacheControl   `json:"cache_control,omitempty"`
}

// anthropicDecoder decodes one request: its breakpoints' lifetimes, in
// prompt order, and the server whose thinking blocks it checks.
type anthropicDecoder struct {
	s        *Server
	thinking bool
	ttls     []string
}

func decodeAnthropic(s *Server, body []byte, c *Conversation) error {
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
	c.Model, c.MaxTokens, c.Stream = req.Model, req.MaxTokens, req.Stream
	d := anthropicDecoder{s: s}
	if t := req.Thinking; t != nil {
		switch {
		case t.Type == "disabled":
		case t.Type != "enabled":
			return fmt.Errorf("thinking.type: Input should be 'enabled' or 'disabled'")
		case t.BudgetTokens < 1024:
			return fmt.Errorf("thinking.enabled.budget_tokens: Input should be greater than or equal to 1024")
		case req.MaxTokens <= t.BudgetTokens:
			return fmt.Errorf("`max_tokens` must be greater than `thinking.budget_tokens`")
		default:
			c.Thinking, d.thinking = t.BudgetTokens, true
		}
	}
	for i, t := range req.Tools {
		if t.Name == "" || !isObject(t.InputSchema) {
			return fmt.Errorf("tools.%d: name and input_schema are required", i)
		}
		d.mark(t.CacheControl)
		c.Tools = append(c.Tools, t.Name)
	}
	system, err := d.text(req.System)
	if err != nil {
		return fmt.Errorf("system: %w", err)
	}
	c.System = system
	for i, m := range req.Messages {
		msg, err := d.msg(i, m.Role, m.Content)
		if err != nil {
			return err
		}
		c.Messages = append(c.Messages, msg)
	}
	if c.CacheTTL, err = d.cacheTTL(); err != nil {
		return err
	}
	return checkPairs(c.Messages)
}

// mark notes a block's breakpoint, if it has one.
func (d *anthropicDecoder) mark(cc *cacheControl) {
	if cc != nil {
		d.ttls = append(d.ttls, cc.TTL)
	}
}

// cacheTTL checks the request's breakpoints as the API does, and returns
// the longest lifetime they name.
func (d *anthropicDecoder) cacheTTL() (string, error) {
	if len(d.ttls) > 4 {
		return "", fmt.Errorf("A maximum of 4 blocks with cache_control may be provided. Found %d.", len(d.ttls))
	}
	ttl, short := "", false
	for _, t := range d.ttls {
		switch t {
		case "", "5m":
			short = true
			ttl = cmp.Or(ttl, t)
		case "1h":
			if short {
				return "", fmt.Errorf("cache_control: a ttl='1h' breakpoint must not come after a ttl='5m' one")
			}
			ttl = t
		default:
			return "", fmt.Errorf("cache_control.ttl: Input should be '5m' or '1h'")
		}
	}
	return ttl, nil
}

func (d *anthropicDecoder) msg(i int, role string, content json.RawMessage) (Msg, error) {
	if role != "user" && role != "assistant" {
		return Msg{}, fmt.Errorf("messages.%d: role: must be user or assistant, not %q", i, role)
	}
	msg := Msg{Role: role}
	var s string
	if json.Unmarshal(content, &s) == nil {
		msg.Text = s
		return msg, nil
	}
	var blocks []anthropicBlock
	if err := json.Unmarshal(content, &blocks); err != nil {
		return Msg{}, fmt.Errorf("messages.%d: content: want a string or an array of blocks: %w", i, err)
	}
	var texts, thoughts []string
	for j, b := range blocks {
		at := fmt.Sprintf("messages.%d.content.%d", i, j)
		thinkingBlock := b.Type == "thinking" || b.Type == "redacted_thinking"
		switch {
		case thinkingBlock && b.CacheControl != nil:
			return Msg{}, fmt.Errorf("%s.cache_control: thinking blocks cannot carry cache_control", at)
		case thinkingBlock && role != "assistant":
			return Msg{}, fmt.Errorf("%s: %s blocks may only be in assistant messages", at, b.Type)
		case b.Type == "thinking":
			if b.Thinking == nil || b.Signature == nil || !d.s.verify(*b.Thinking, *b.Signature) {
				return Msg{}, fmt.Errorf("%s: Invalid `signature` in `thinking` block", at)
			}
			thoughts = append(thoughts, *b.Thinking)
			continue
		case b.Type == "redacted_thinking":
			if b.Data == nil || *b.Data == "" {
				return Msg{}, fmt.Errorf("%s.data: Field required", at)
			}
			continue
		}
		d.mark(b.CacheControl)
		switch {
		case b.Type == "text" && b.Text != "":
			texts = append(texts, b.Text)
		case b.Type == "text":
			return Msg{}, fmt.Errorf("%s: text content blocks must be non-empty", at)
		case b.Type == "tool_use" && role == "assistant":
			if b.ID == "" || b.Name == "" || !isObject(b.Input) {
				return Msg{}, fmt.Errorf("%s: tool_use needs an id, a name and an object input", at)
			}
			msg.Calls = append(msg.Calls, Call{ID: b.ID, Name: b.Name, Input: b.Input})
		case b.Type == "tool_result" && role == "user":
			text, err := anthropicText(b.Content)
			if err != nil || b.ToolUseID == "" {
				return Msg{}, fmt.Errorf("%s: tool_result needs a tool_use_id and text content", at)
			}
			msg.Results = append(msg.Results, Result{CallID: b.ToolUseID, Content: text, IsError: b.IsError})
		default:
			return Msg{}, fmt.Errorf("%s: unexpected %q block in a %s message", at, b.Type, role)
		}
	}
	msg.Text = strings.Join(texts, "\n\n")
	msg.Thinking = strings.Join(thoughts, "\n\n")
	if d.thinking && role == "assistant" {
		if err := d.s.checkThinking(i, blocks, msg.Calls, thoughts); err != nil {
			return Msg{}, err
		}
	}
	return msg, nil
}

// text reads the system prompt: a string, an array of text blocks, or
// nothing.
func (d *anthropicDecoder) text(raw json.RawMessage) (string, error) {
	var blocks []anthropicBlock
	if json.Unmarshal(raw, &blocks) == nil {
		for _, b := range blocks {
			d.mark(b.CacheControl)
		}
	}
	return anthropicText(raw)
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

// thinking is a thinking block the server sent.
type thinking struct {
	text, signature string
}

// thinkingKey signs the thinking blocks the servers send. It is the same
// for every server, so that two servers answering the same turns answer
// them byte for byte alike.
var thinkingKey = []byte("modeltest thinking")

// sign returns the signature of a thinking block's text.
func (s *Server) sign(text string) string {
	mac := hmac.New(sha256.New, thinkingKey)
	mac.Write([]byte(text))
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// verify reports whether signature is the one the server gave text.
func (s *Server) verify(text, signature string) bool {
	return hmac.Equal([]byte(s.sign(text)), []byte(signature))
}

// checkThinking enforces, in a request with thinking enabled, that the
// assistant message i carries the thinking block sent with its tool
// calls, as the API requires.
func (s *Server) checkThinking(i int, blocks []anthropicBlock, calls []Call, thoughts []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, call := range calls {
		th, ok := s.issued[call.ID]
		if !ok {
			continue
		}
		if len(thoughts) == 0 {
			return fmt.Errorf("messages.%d.content.0.type: Expected `thinking` or `redacted_thinking`, but found `%s`. "+
				"When `thinking` is enabled, a final `assistant` message must start with a thinking block "+
				"(preceeding the lastmost set of `tool_use` and `tool_result` blocks). "+
				"We recommend you include thinking blocks from previous turns.", i, blocks[0].Type)
		}
		found := false
		for _, t := range thoughts {
			found = found || t == th.text
		}
		if !found {
			return fmt.Errorf("messages.%d.content.0: Invalid `signature` in `thinking` block", i)
		}
	}
	return nil
}

func isObject(raw json.RawMessage) bool {
	// Decoded from a request that json.Unmarshal checked whole: valid.
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '{'
}
