// Package wire is the Managed Agents API as the gateway speaks it: the JSON
// of its errors, pages, sessions and events, and [Fold], which turns a
// session's log into the API's events. Nothing here does I/O: what a log
// becomes is decided from the log alone, and table-tested.
package wire

import (
	"encoding/json"
	"time"
)

// ErrorBody is the body of every error answer:
//
//	{"type": "error", "error": {"type": "not_found_error", "message": "..."}}
type ErrorBody struct {
	Type      string      `json:"type"`
	Error     ErrorDetail `json:"error"`
	RequestID string      `json:"request_id,omitempty"`
}

// ErrorDetail says what went wrong.
type ErrorDetail struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// Error types of the API, by the HTTP status each goes with.
const (
	InvalidRequest = "invalid_request_error" // 400
	Authentication = "authentication_error"  // 401
	Permission     = "permission_error"      // 403
	NotFound       = "not_found_error"       // 404
	TooLarge       = "request_too_large"     // 413
	RateLimit      = "rate_limit_error"      // 429
	APIError       = "api_error"             // 500
	Overloaded     = "overloaded_error"      // 529
)

// Page is a page of a list: its data, and the cursor of the next page
// (null on the last), which the client sends back as ?page=. PrevPage is
// always null: lists are read forwards.
type Page[T any] struct {
	Data     []T     `json:"data"`
	NextPage *string `json:"next_page"`
	PrevPage *string `json:"prev_page"`
}

// Block is a content block of a message, a tool result or a system
// message: text only, Corral's models answer with nothing else.
type Block struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// Text returns a text block.
func Text(s string) Block { return Block{Type: "text", Text: s} }

// Event is a session's event as the API shows it: the fields of every type
// in one struct, each set only for the types that carry it.
type Event struct {
	ID   string `json:"id"`
	Type string `json:"type"`
	// ProcessedAt is when the event was recorded; null for an event sent
	// and not taken yet.
	ProcessedAt *time.Time `json:"processed_at"`

	Content []Block `json:"content,omitempty"`
	// Name and Input are a tool call's (agent.tool_use).
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
	// EvaluatedPermission is what the policy made of a call: allow, ask
	// (held for a reviewer) or deny.
	EvaluatedPermission string `json:"evaluated_permission,omitempty"`
	// ToolUseID names the agent.tool_use event a result or a
	// confirmation is of.
	ToolUseID string `json:"tool_use_id,omitempty"`
	IsError   *bool  `json:"is_error,omitempty"`
	// Result and DenyMessage are a user.tool_confirmation's.
	Result      string `json:"result,omitempty"`
	DenyMessage string `json:"deny_message,omitempty"`

	StopReason *StopReason `json:"stop_reason,omitempty"`
	Error      *EventError `json:"error,omitempty"`

	ModelRequestStartID string      `json:"model_request_start_id,omitempty"`
	ModelUsage          *ModelUsage `json:"model_usage,omitempty"`

	// Cursor is where the event is in its session's events: what a page
	// goes on after. It is not part of the event's JSON.
	Cursor Cursor `json:"-"`
}

// StopReason says why a session went idle: end_turn, requires_action
// (EventIDs are the calls waiting for a confirmation), budget_reached.
type StopReason struct {
	Type     string   `json:"type"`
	EventIDs []string `json:"event_ids,omitempty"`
}

// EventError is the error of a session.error event.
type EventError struct {
	Type        string      `json:"type"`
	Message     string      `json:"message"`
	RetryStatus RetryStatus `json:"retry_status"`
}

// RetryStatus says whether the session retries: Corral's failures are
// "terminal" (a follow-up is a new request).
type RetryStatus struct {
	Type string `json:"type"`
}

// ModelUsage is a model request's tokens.
type ModelUsage struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
}

// SendResult is the answer to events sent: the events as taken.
type SendResult struct {
	Data []Event `json:"data"`
}
