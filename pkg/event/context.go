package event

import "corral.dev/pkg/model"

// ContextCompacted records that the harness made a session's conversation
// smaller so that its next request fits the model's context window: the
// results of older tool calls cleared (the model reads a note saying where
// each whole output is), and, if that was not enough, the older turns
// replaced by a summary the model wrote of them. It holds all a reader
// folding the log needs to build the same conversation again, so a
// harness that rebuilds the session after a crash sends what was sent
// before. Schema: schemas/context/v1/compacted.json.
type ContextCompacted struct {
	Header
	// Turn is the number of model responses the session had recorded: the
	// compaction was made before the model was asked for turn Turn+1.
	Turn int `json:"turn"`
	// ClearedThrough is the last turn whose calls' results are cleared;
	// zero (or a turn cleared before) clears nothing more.
	ClearedThrough int `json:"cleared_through,omitempty"`
	// SummarizedThrough, when set, is the last turn Summary stands for:
	// the conversation before the model's response of the turn after it
	// is replaced by Summary.
	SummarizedThrough int    `json:"summarized_through,omitempty"`
	Summary           string `json:"summary,omitempty"`
	// Model is the model that wrote Summary, with its provider prefix;
	// Usage is what that call took, which budgets count as a model
	// response's (a compaction is no step).
	Model string      `json:"model,omitempty"`
	Usage model.Usage `json:"usage,omitzero"`
	// User is the session's user, whose daily usage the summary counts in.
	User string `json:"user,omitempty"`
	// TokensBefore and TokensAfter are the harness's estimates of the next
	// request's input tokens before the compaction and after it (the
	// summary left out), for people watching.
	TokensBefore int `json:"tokens_before"`
	TokensAfter  int `json:"tokens_after"`
}
