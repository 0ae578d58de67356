package modeltest

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
)

// replyAnthropic renders t as a Messages API response, whole and as the
// events that stream it.
func replyAnthropic(s *Server, c Conversation, t Turn, u usage) (reply, error) {
	content := []anthropicBlock{}
	var sent *thinking
	if t.Thinking != "" && c.Thinking > 0 {
		sent = &thinking{text: t.Thinking, signature: s.sign(t.Thinking)}
		content = append(content, anthropicBlock{Type: "thinking", Thinking: &sent.text, Signature: &sent.signature})
	}
	text, calls := t.Text, t.Calls
	if t.Refusal != "" {
		text, calls = t.Refusal, nil
	}
	if text != "" {
		content = append(content, anthropicBlock{Type: "text", Text: text})
	}
	args := make([][]byte, len(calls))
	for i, call := range calls {
		raw, err := rawInput(call.Input)
		if err != nil {
			return reply{}, fmt.Errorf("call %d: %w", i, err)
		}
		if !json.Valid(raw) {
			raw, _ = json.Marshal(string(raw)) // a string always marshals
		}
		var compact bytes.Buffer
		_ = json.Compact(&compact, raw) // valid, just checked
		args[i] = compact.Bytes()
		content = append(content, anthropicBlock{Type: "tool_use", ID: callID(call, "toolu_"), Name: call.Name, Input: args[i]})
	}
	if sent != nil {
		s.mu.Lock()
		for _, b := range content {
			if b.Type == "tool_use" {
				s.issued[b.ID] = *sent
			}
		}
		s.mu.Unlock()
	}
	stop := "end_turn"
	switch {
	case t.StopReason != "":
		stop = t.StopReason
	case t.Refusal != "":
		stop = "refusal"
	case len(calls) > 0:
		stop = "tool_use"
	}
	thought := ""
	if sent != nil {
		thought = sent.text
	}
	output := outputTokens(text+thought, args, calls)
	use := func(output int) map[string]any {
		return map[string]any{
			"input_tokens":                u.input - u.read - u.written,
			"cache_read_input_tokens":     u.read,
			"cache_creation_input_tokens": u.written,
			"cache_creation": map[string]int{
				"ephemeral_5m_input_tokens": u.written - u.writtenLong,
				"ephemeral_1h_input_tokens": u.writtenLong,
			},
			"output_tokens": output,
		}
	}
	id := "msg_" + rand.Text()
	message := func(content []anthropicBlock, stop any, usage map[string]any) map[string]any {
		return map[string]any{
			"id":            id,
			"type":          "message",
			"role":          "assistant",
			"model":         c.Model,
			"content":       content,
			"stop_reason":   stop,
			"stop_sequence": nil,
			"usage":         usage,
		}
	}
	rep := reply{whole: message(content, stop, use(output))}

	// The stream: the message without content, each block started,
	// streamed in deltas and stopped, then the stop reason and the
	// output's usage.
	add := func(name string, data map[string]any) {
		data["type"] = name
		rep.events = append(rep.events, event{name: name, data: data})
	}
	firstText, firstDelta := -1, -1
	delta := func(i int, d map[string]any) {
		if firstDelta < 0 {
			firstDelta = len(rep.events)
		}
		if firstText < 0 && d["type"] == "text_delta" {
			firstText = len(rep.events)
		}
		add("content_block_delta", map[string]any{"index": i, "delta": d})
	}
	add("message_start", map[string]any{"message": message([]anthropicBlock{}, nil, use(1))})
	for i, b := range content {
		switch b.Type {
		case "text":
			add("content_block_start", map[string]any{"index": i, "content_block": map[string]any{"type": "text", "text": ""}})
			for _, p := range pieces(b.Text) {
				delta(i, map[string]any{"type": "text_delta", "text": p})
			}
		case "thinking":
			add("content_block_start", map[string]any{"index": i, "content_block": map[string]any{"type": "thinking", "thinking": ""}})
			for _, p := range pieces(*b.Thinking) {
				delta(i, map[string]any{"type": "thinking_delta", "thinking": p})
			}
			add("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "signature_delta", "signature": *b.Signature}})
		case "tool_use":
			add("content_block_start", map[string]any{"index": i, "content_block": map[string]any{"type": "tool_use", "id": b.ID, "name": b.Name, "input": map[string]any{}}})
			for _, p := range pieces(string(b.Input)) {
				delta(i, map[string]any{"type": "input_json_delta", "partial_json": p})
			}
		}
		add("content_block_stop", map[string]any{"index": i})
		if i == 0 {
			add("ping", map[string]any{})
		}
	}
	add("message_delta", map[string]any{
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]int{"output_tokens": output},
	})
	add("message_stop", map[string]any{})
	rep.pivot = max(firstDelta, 0)
	if firstText >= 0 {
		rep.pivot = firstText
	}
	return rep, nil
}

func anthropicError(r *rejection) any {
	typ := r.typ
	if typ == "" {
		typ = "api_error"
		switch r.status {
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
	}
	return map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": r.msg}}
}

// anthropicErrorEvent is the error event that ends a stream failing with
// kind, as the API sends it.
func anthropicErrorEvent(kind string) event {
	msg := "modeltest: injected " + kind
	if kind == "overloaded_error" {
		msg = "Overloaded"
	}
	return event{name: "error", data: map[string]any{"type": "error", "error": map[string]string{"type": kind, "message": msg}}}
}
