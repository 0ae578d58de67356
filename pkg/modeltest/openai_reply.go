package modeltest

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"time"
)

// replyOpenAI renders t as a Chat Completions response, whole and as the
// chunks that stream it.
func replyOpenAI(_ *Server, c Conversation, t Turn, u usage) (reply, error) {
	text, calls := t.Text, t.Calls
	if t.Refusal != "" {
		text, calls = "", nil
	}
	var toolCalls []openAIToolCall
	args := make([][]byte, len(calls))
	for i, call := range calls {
		raw, err := rawInput(call.Input)
		if err != nil {
			return reply{}, fmt.Errorf("call %d: %w", i, err)
		}
		args[i] = raw
		tc := openAIToolCall{ID: callID(call, "call_"), Type: "function"}
		tc.Function.Name = call.Name
		tc.Function.Arguments = string(raw)
		toolCalls = append(toolCalls, tc)
	}
	var content, refusal *string
	if t.Refusal != "" {
		refusal = &t.Refusal
	} else if text != "" || len(toolCalls) == 0 {
		content = &text
	}
	finish := "stop"
	switch {
	case t.StopReason != "":
		finish = t.StopReason
	case len(toolCalls) > 0:
		finish = "tool_calls"
	}
	message := map[string]any{"role": "assistant", "content": content, "refusal": refusal}
	if len(toolCalls) > 0 {
		message["tool_calls"] = toolCalls
	}
	output := outputTokens(text+t.Refusal, args, calls)
	use := map[string]any{
		"prompt_tokens":         u.input,
		"completion_tokens":     output,
		"total_tokens":          u.input + output,
		"prompt_tokens_details": map[string]int{"cached_tokens": u.read},
	}
	id, created := "chatcmpl-"+rand.Text(), time.Now().Unix()
	rep := reply{whole: map[string]any{
		"id":      id,
		"object":  "chat.completion",
		"created": created,
		"model":   c.Model,
		"choices": []map[string]any{{
			"index":         0,
			"message":       message,
			"finish_reason": finish,
		}},
		"usage": use,
	}}

	// The stream: the role, the text or refusal in pieces, each call's ID
	// and name then its arguments in pieces, the finish reason, the usage
	// when asked for, and [DONE].
	var opts struct {
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	_ = json.Unmarshal(c.Body, &opts) // decoded before, without error
	withUsage := opts.StreamOptions.IncludeUsage
	chunk := func(delta map[string]any, finish any) {
		ch := map[string]any{
			"id":      id,
			"object":  "chat.completion.chunk",
			"created": created,
			"model":   c.Model,
			"choices": []map[string]any{{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}},
		}
		if withUsage {
			ch["usage"] = nil
		}
		rep.events = append(rep.events, event{data: ch})
	}
	firstText, firstDelta := -1, -1
	mark := func(text bool) {
		if firstDelta < 0 {
			firstDelta = len(rep.events)
		}
		if text && firstText < 0 {
			firstText = len(rep.events)
		}
	}
	if refusal != nil {
		chunk(map[string]any{"role": "assistant", "content": nil, "refusal": ""}, nil)
		for _, p := range pieces(*refusal) {
			mark(true)
			chunk(map[string]any{"refusal": p}, nil)
		}
	} else {
		chunk(map[string]any{"role": "assistant", "content": "", "refusal": nil}, nil)
		for _, p := range pieces(text) {
			mark(true)
			chunk(map[string]any{"content": p}, nil)
		}
	}
	for i, tc := range toolCalls {
		mark(false)
		chunk(map[string]any{"tool_calls": []map[string]any{{
			"index": i, "id": tc.ID, "type": "function",
			"function": map[string]any{"name": tc.Function.Name, "arguments": ""},
		}}}, nil)
		for _, p := range pieces(tc.Function.Arguments) {
			chunk(map[string]any{"tool_calls": []map[string]any{{
				"index": i, "function": map[string]any{"arguments": p},
			}}}, nil)
		}
	}
	chunk(map[string]any{}, finish)
	if withUsage {
		rep.events = append(rep.events, event{data: map[string]any{
			"id":      id,
			"object":  "chat.completion.chunk",
			"created": created,
			"model":   c.Model,
			"choices": []any{},
			"usage":   use,
		}})
	}
	rep.events = append(rep.events, event{data: "[DONE]"})
	rep.pivot = max(firstDelta, 0)
	if firstText >= 0 {
		rep.pivot = firstText
	}
	return rep, nil
}

func openAIError(r *rejection) any {
	typ, code := r.typ, any(nil)
	if r.code != "" {
		code = r.code
	}
	if typ == "" {
		switch {
		case r.status == 401:
			typ, code = "invalid_request_error", "invalid_api_key"
		case r.status == 404:
			typ, code = "invalid_request_error", "model_not_found"
		case r.status == 429:
			typ, code = "requests", "rate_limit_exceeded"
		case r.status < 500:
			typ = "invalid_request_error"
		default:
			typ = "server_error"
		}
	}
	var param any
	if r.param != "" {
		param = r.param
	}
	return map[string]any{"error": map[string]any{"message": r.msg, "type": typ, "param": param, "code": code}}
}

// openAIErrorEvent is the error chunk that ends a stream failing with
// kind, an Anthropic error type, as the API sends the same failure.
func openAIErrorEvent(kind string) event {
	status := kindStatus(kind)
	msg := "modeltest: injected " + kind
	switch status {
	case 429:
		msg = "Rate limit reached for requests. Please try again in 20ms."
	case 500, 529:
		msg = "The server had an error while processing your request. Sorry about that!"
	}
	return event{data: openAIError(&rejection{status: status, msg: msg})}
}
