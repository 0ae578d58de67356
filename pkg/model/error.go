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
)

// APIError is an error status answered by a provider. Use [errors.As] to
// reach it; errors.Is(err, [ErrPermanent]) tells whether retrying can help.
type APIError struct {
	// Provider is "anthropic" or "openai".
	Provider string
	// Status is the HTTP status code.
	Status int
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
func parseAPIError(provider string, resp *http.Response, body []byte, key Secret) *APIError {
	e := &APIError{Provider: provider, Status: resp.StatusCode, RequestID: requestID(resp.Header)}
	var wire struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &wire) == nil && len(wire.Error) > 0 {
		var obj struct {
			Type    string          `json:"type"`
			Message string          `json:"message"`
			Code    json.RawMessage `json:"code"`
		}
		var s string
		switch {
		case json.Unmarshal(wire.Error, &obj) == nil:
			e.Type, e.Message = obj.Type, obj.Message
			if e.Type == "" {
				e.Type = codeString(obj.Code)
			}
		case json.Unmarshal(wire.Error, &s) == nil:
			e.Message = s
		}
	}
	if e.Type == "" && e.Message == "" {
		e.Message = truncate(strings.TrimSpace(string(body)), maxErrorMessage)
	}
	if e.Message == "" {
		e.Message = http.StatusText(resp.StatusCode)
	}
	if key != "" {
		e.Message = strings.ReplaceAll(e.Message, string(key), "REDACTED")
	}
	return e
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
