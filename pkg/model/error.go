package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"
)

var (
	// ErrPermanent marks a failure that retrying the same request cannot fix:
	// a rejected key, an unknown model, a malformed request. [*APIError]
	// matches it for 4xx statuses other than 408, 409 and 429.
	ErrPermanent = errors.New("permanent model error")
	// ErrUnknownModel is returned by [Providers.Resolve] for a model name it
	// cannot map to a configured provider.
	ErrUnknownModel = errors.New("unknown model")
	// ErrNotConfigured is returned by [Providers.Resolve] for a model of
	// a provider the process has no key or server for.
	ErrNotConfigured = errors.New("model provider not configured")
)

// APIError is an error status answered by a provider. Use [errors.As] to
// reach it; errors.Is(err, [ErrPermanent]) tells whether retrying can help.
type APIError struct {
	// Provider is "anthropic" or "openai".
	Provider string
	// Status is the HTTP status code; for an error event in a streamed
	// response (Event), the status its type stands for.
	Status int
	// Event reports that the error came as an event of a streamed
	// response whose status was 200.
	Event bool
	// Type is the provider's error type or code, such as
	// "rate_limit_error" or "invalid_api_key"; it may be empty.
	Type string
	// Message is the provider's explanation, or the start of the response
	// body when it has none. The API key is redacted from it.
	Message string
	// RequestID is the provider's request ID, when it sent one.
	RequestID string

	// retryAfter is how long the provider asked us to wait, when it did.
	retryAfter    time.Duration
	hasRetryAfter bool
}

// Error implements error.
func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: status %d", e.Provider, e.Status)
	if e.Event {
		b.WriteString(" (an error event in the stream)")
	}
	if e.Type != "" {
		b.WriteString(" " + e.Type)
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	if e.RequestID != "" {
		b.WriteString(" (request " + e.RequestID + ")")
	}
	return b.String()
}

// Is reports whether e matches [ErrPermanent]: a 4xx status other than
// 408 (timeout), 409 (conflict) and 429 (rate limit).
func (e *APIError) Is(target error) bool {
	return target == ErrPermanent && e.Status >= 400 && e.Status < 500 && !retryable(e.Status)
}

// retryable reports whether a request that got status may succeed if sent again.
func retryable(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooManyRequests,
		http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable,
		http.StatusGatewayTimeout, 529: // 529: Anthropic is overloaded
		return true
	}
	return false
}

// maxErrorMessage bounds the message kept from an error body that is not in
// a known shape (an HTML page from a proxy, say).
const maxErrorMessage = 512

// parseAPIError builds an [*APIError] from an error response. It knows
// Anthropic's {"type":"error","error":{"type","message"}}, OpenAI's
// {"error":{"message","type","code"}}, and the {"error":"message"} some
// OpenAI-compatible servers send. key is redacted from the message.
func parseAPIError(provider string, status int, h http.Header, body []byte, key Secret) *APIError {
	e := &APIError{Provider: provider, Status: status, RequestID: requestID(h)}
	e.Type, e.Message, _ = errorFields(body)
	if e.Type == "" && e.Message == "" {
		e.Message = truncate(strings.TrimSpace(string(body)), maxErrorMessage)
	}
	if e.Message == "" {
		e.Message = http.StatusText(status)
	}
	e.Message = redact(e.Message, key)
	return e
}

// errorFields reads the type (or else the code), the message and the
// raw code of an error body in one of the shapes [parseAPIError] knows.
func errorFields(body []byte) (typ, msg string, code json.RawMessage) {
	var wire struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &wire) != nil || len(wire.Error) == 0 {
		return "", "", nil
	}
	var obj struct {
		Type    string          `json:"type"`
		Message string          `json:"message"`
		Code    json.RawMessage `json:"code"`
	}
	var s string
	switch {
	case json.Unmarshal(wire.Error, &obj) == nil:
		typ = obj.Type
		if typ == "" {
			typ = codeString(obj.Code)
		}
		return typ, obj.Message, obj.Code
	case json.Unmarshal(wire.Error, &s) == nil:
		return "", s, nil
	}
	return "", "", nil
}

// eventError builds an [*APIError] from the error event of a streamed
// response, its data in one of the shapes [parseAPIError] knows. Its
// Status is the one the error's type stands for (overloaded_error is
// 529, rate_limit_error 429), or its numeric code where a gateway sends
// one; an unknown error counts as a 500, which is retried.
func eventError(provider string, data []byte) *APIError {
	typ, msg, code := errorFields(data)
	// An event may be as large as the stream: what it says is kept to
	// what an error body gives, since it ends up in logs and events.
	e := &APIError{Provider: provider, Event: true, Type: truncate(typ, maxErrorMessage),
		Message: truncate(msg, maxErrorBody), Status: eventStatus(typ, code)}
	if e.Type == "" && e.Message == "" {
		e.Message = truncate(strings.TrimSpace(string(data)), maxErrorMessage)
	}
	if e.Message == "" {
		e.Message = http.StatusText(e.Status)
	}
	return e
}

// eventStatus returns the HTTP status an error event's type or code
// stands for.
func eventStatus(typ string, code json.RawMessage) int {
	var n int
	if json.Unmarshal(code, &n) == nil && n >= 400 && n <= 599 {
		return n
	}
	for _, t := range []string{typ, codeString(code)} {
		switch t {
		case "invalid_request_error", "context_length_exceeded", "invalid_prompt":
			return http.StatusBadRequest
		case "authentication_error", "invalid_api_key":
			return http.StatusUnauthorized
		case "permission_error":
			return http.StatusForbidden
		case "not_found_error", "model_not_found":
			return http.StatusNotFound
		case "request_too_large":
			return http.StatusRequestEntityTooLarge
		case "rate_limit_error", "rate_limit_exceeded", "requests", "tokens", "insufficient_quota":
			return http.StatusTooManyRequests
		case "overloaded_error":
			return 529
		case "timeout_error":
			return http.StatusGatewayTimeout
		}
	}
	return http.StatusInternalServerError
}

// redact removes key from msg.
func redact(msg string, key Secret) string {
	if key == "" {
		return msg
	}
	return strings.ReplaceAll(msg, string(key), "REDACTED")
}

// codeString renders OpenAI's error code, which may be a string, a number
// or null.
func codeString(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	return string(raw)
}

func requestID(h http.Header) string {
	if id := h.Get("request-id"); id != "" {
		return id
	}
	return h.Get("x-request-id")
}

// truncate cuts s to at most n bytes without splitting a rune.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
