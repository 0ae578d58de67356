package model_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"corral.dev/pkg/model"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/tool"
)

// TestAgainstModeltest runs a two-turn tool-use conversation through each
// real client and the fake server, and checks what each side saw.
func TestAgainstModeltest(t *testing.T) {
	t.Parallel()
	for _, p := range providers {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			srv := modeltest.New(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
				if modeltest.Turns(c) == 0 {
					return modeltest.Turn{Text: "Let me look.", Calls: []modeltest.Call{
						{Name: tool.Bash, Input: map[string]any{"command": "ls"}},
						{Name: tool.Read, Input: `{"file_path":"/workspace/missing"}`},
					}}, nil
				}
				var parts []string
				for _, r := range modeltest.Results(c) {
					parts = append(parts, r.Content)
				}
				return modeltest.Turn{Text: "Saw: " + strings.Join(parts, " | ")}, nil
			})
			srv.FailNext(429, "0", 1)
			c := p.new(model.Config{APIKey: "test-key", BaseURL: srv.URL(), Backoff: time.Millisecond})
			req := model.Request{
				Model:    "fake-1",
				System:   "Be brief.",
				Messages: []model.Message{{Role: model.User, Content: []model.Block{{Type: model.TextBlock, Text: "what is here?"}}}},
				Tools:    tool.Specs(),
			}

			first, err := c.Complete(t.Context(), req)
			if err != nil {
				t.Fatalf("first turn: %v", err)
			}
			uses := first.ToolUses()
			if len(uses) != 2 || uses[0].Name != tool.Bash || uses[1].Name != tool.Read || uses[0].ID == uses[1].ID {
				t.Fatalf("first turn tool uses = %+v, want Bash and Read with distinct IDs", uses)
			}
			if args, err := tool.Parse(uses[0].Name, uses[0].Input); err != nil || args.(*tool.BashArgs).Command != "ls" {
				t.Errorf("Bash input %s: parsed %+v, %v", uses[0].Input, args, err)
			}
			if first.Text() != "Let me look." || first.Usage.InputTokens == 0 || first.Usage.OutputTokens == 0 || first.Model != "fake-1" {
				t.Errorf("first turn = %+v", first)
			}
			wantStop := map[string][2]string{"anthropic": {"tool_use", "end_turn"}, "openai": {"tool_calls", "stop"}}[p.name]
			if first.StopReason != wantStop[0] {
				t.Errorf("first stop reason = %q, want %q", first.StopReason, wantStop[0])
			}

			req.Messages = append(req.Messages,
				model.Message{Role: model.Assistant, Content: first.Content},
				model.Message{Role: model.User, Content: []model.Block{
					{Type: model.ToolResultBlock, ToolUseID: uses[0].ID, Content: "a.go"},
					{Type: model.ToolResultBlock, ToolUseID: uses[1].ID, Content: "no such file", IsError: true},
				}},
			)
			second, err := c.Complete(t.Context(), req)
			if err != nil {
				t.Fatalf("second turn: %v", err)
			}
			wantText := "Saw: a.go | no such file"
			if p.name == "openai" {
				wantText = "Saw: a.go | Error: no such file"
			}
			if second.Text() != wantText || len(second.ToolUses()) != 0 || second.StopReason != wantStop[1] {
				t.Errorf("second turn = %+v, want text %q and stop reason %q", second, wantText, wantStop[1])
			}

			reqs := srv.Requests()
			if len(reqs) != 3 {
				t.Fatalf("server saw %d requests, want 3 (one rate-limited)", len(reqs))
			}
			got := reqs[2]
			if got.Provider != p.name || got.Model != "fake-1" || got.System != "Be brief." || got.APIKey != "test-key" {
				t.Errorf("conversation header = %q %q %q %q", got.Provider, got.Model, got.System, got.APIKey)
			}
			if want := []string{tool.Bash, tool.Read, tool.Write, tool.Edit, tool.Glob, tool.Grep}; !reflect.DeepEqual(got.Tools, want) {
				t.Errorf("tools = %v, want %v", got.Tools, want)
			}
			if modeltest.Turns(got) != 1 {
				t.Errorf("Turns = %d, want 1", modeltest.Turns(got))
			}
			assistant := got.Messages[1]
			if assistant.Role != "assistant" || assistant.Text != "Let me look." || len(assistant.Calls) != 2 || assistant.Calls[0].ID != uses[0].ID {
				t.Errorf("assistant message = %+v", assistant)
			}
			if in, _ := assistant.Calls[0].Input.(json.RawMessage); string(in) != `{"command":"ls"}` {
				t.Errorf("call input = %#v, want {\"command\":\"ls\"}", assistant.Calls[0].Input)
			}
			wantResults := []modeltest.Result{{CallID: uses[0].ID, Content: "a.go"}, {CallID: uses[1].ID, Content: "no such file", IsError: true}}
			if p.name == "openai" {
				wantResults[1].Content = "Error: no such file"
			}
			if results := modeltest.Results(got); !reflect.DeepEqual(results, wantResults) {
				t.Errorf("results = %+v, want %+v", results, wantResults)
			}
		})
	}
}

// TestMalformedArgumentsRoundTrip checks that arguments the model botched
// reach the caller and go back to the model as the model wrote them.
func TestMalformedArgumentsRoundTrip(t *testing.T) {
	t.Parallel()
	const bad = `{"command": "ls`
	srv := modeltest.New(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
		if modeltest.Turns(c) == 0 {
			return modeltest.Turn{Calls: []modeltest.Call{{Name: tool.Bash, Input: bad}}}, nil
		}
		return modeltest.Turn{Text: "sorry"}, nil
	})
	c := model.NewOpenAI(model.Config{BaseURL: srv.URL()})
	req := model.Request{Model: "m", Messages: []model.Message{{Role: model.User, Content: []model.Block{{Type: model.TextBlock, Text: "go"}}}}}
	first, err := c.Complete(t.Context(), req)
	if err != nil {
		t.Fatalf("first turn: %v", err)
	}
	use := first.ToolUses()[0]
	if _, err := tool.Parse(use.Name, use.Input); err == nil {
		t.Errorf("tool.Parse(%s) succeeded, want an error for malformed arguments", use.Input)
	}
	req.Messages = append(req.Messages,
		model.Message{Role: model.Assistant, Content: first.Content},
		model.Message{Role: model.User, Content: []model.Block{{Type: model.ToolResultBlock, ToolUseID: use.ID, Content: "invalid arguments", IsError: true}}},
	)
	if _, err := c.Complete(t.Context(), req); err != nil {
		t.Fatalf("second turn: %v", err)
	}
	reqs := srv.Requests()
	if got := reqs[len(reqs)-1].Messages[1].Calls[0].Input; got != bad {
		t.Errorf("arguments sent back = %#v, want %q", got, bad)
	}
}
