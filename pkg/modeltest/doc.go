// Package modeltest is a fake model provider for tests: one
// [httptest.Server] that speaks both the Anthropic Messages API
// (POST /v1/messages) and the OpenAI Chat Completions API
// (POST /v1/chat/completions) at the wire level, so the real clients of
// corral.dev/pkg/model are exercised end to end.
//
// A [Script] decides each reply from the [Conversation] the server decoded
// from the request, with its own structs rather than the client's, and
// checks the request the way the real APIs do (tool results must answer
// the preceding tool calls, say) answering 400 when it breaks a rule:
//
//	srv := modeltest.New(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
//		if modeltest.Turns(c) == 0 {
//			return modeltest.Turn{Calls: []modeltest.Call{{Name: "Bash", Input: map[string]any{"command": "ls"}}}}, nil
//		}
//		return modeltest.Turn{Text: "done: " + modeltest.Results(c)[0].Content}, nil
//	})
//	client := model.NewAnthropic(model.Config{APIKey: "k", BaseURL: srv.URL()})
//
// A request that asks for a stream ("stream": true) is answered with
// server-sent events as each API sends them, each flushed: Anthropic's
// message_start, content blocks started, streamed in deltas and stopped,
// message_delta and message_stop; OpenAI's chunks, the usage chunk when
// stream_options asks for it, and [DONE]. Other requests are answered
// whole. Both are billed by the same prompt cache the providers keep
// (see cache.go). A [Turn] may think (Anthropic's signed thinking blocks,
// checked when sent back), refuse, stop for its own reason, or hold its
// stream after the first text delta ([Turn.Hold], [Turn.OnFirstDelta]).
//
// [Server.FailNext] makes the next requests fail with an error status,
// [Server.CutNext] cuts the next replies in the middle, and
// [Server.ErrorEventNext] ends them with an error event, to exercise
// retries; [Server.SetContextWindow] refuses prompts over a length.
package modeltest
