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
// [Server.FailNext] makes the next requests fail with an error status, to
// exercise retries.
package modeltest
