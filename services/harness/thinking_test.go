package harness

import (
	"encoding/json"
	"testing"

	"github.com/google/uuid"

	"corral.dev/pkg/event"
	"corral.dev/pkg/model"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
)

// A thinking model's thinking block goes into the log with its signature,
// and back to the provider byte for byte with the turn's tool call (the
// fake refuses a block that is altered or missing, as the API does).
func TestThinkingRoundTripsThroughTheLog(t *testing.T) {
	_, _, js := natstest.Run(t)
	fake := modeltest.New(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
		if modeltest.Turns(c) == 0 {
			// A tool the harness refuses: its result is the harness's
			// own, and the next turn follows at once.
			return modeltest.Turn{Thinking: "The user wants \"quotes\" <kept> & \u00e9t\u00e9.", Calls: []modeltest.Call{{Name: "Teleport", Input: map[string]any{"to": "mars"}}}}, nil
		}
		return modeltest.Turn{Text: "done"}, nil
	})
	runHarnessWith(t, js, fake, map[string]string{
		"ANTHROPIC_BASE_URL": fake.URL(), "ANTHROPIC_API_KEY": "k",
		"CORRAL_MODEL": "anthropic:claude-sonnet-4-5", "CORRAL_THINKING_BUDGET": "2048",
	})
	session := uuid.New()
	request(t, js, session, "think first")
	if done := completion(t, js, session); done.Answer != "done" {
		t.Fatalf("answer %q", done.Answer)
	}

	msgs := sessionEvents(t, js, session, event.TypeModelResponded)
	var first event.ModelResponded
	if err := json.Unmarshal(msgs[0].Data, &first); err != nil {
		t.Fatal(err)
	}
	if len(first.Content) < 2 || first.Content[0].Type != model.ThinkingBlock || first.Content[0].Signature == "" {
		t.Fatalf("first response recorded as %+v: want its thinking block, signed", first.Content)
	}
	reqs := fake.Requests()
	if len(reqs) != 2 || reqs[0].Thinking != 2048 || reqs[1].Thinking != 2048 {
		t.Fatalf("%d requests; want 2, each with a thinking budget of 2048", len(reqs))
	}
	// The block as the provider sent it, and as the second request sent
	// it back: the same bytes.
	var sent struct {
		Messages []struct {
			Role    string            `json:"role"`
			Content []json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(reqs[1].Body, &sent); err != nil {
		t.Fatal(err)
	}
	if len(sent.Messages) < 2 || sent.Messages[1].Role != "assistant" {
		t.Fatalf("second request's messages: %+v", sent.Messages)
	}
	var back model.Block
	if err := json.Unmarshal(sent.Messages[1].Content[0], &back); err != nil {
		t.Fatal(err)
	}
	if back.Type != model.ThinkingBlock || back.Thinking != first.Content[0].Thinking || back.Signature != first.Content[0].Signature {
		t.Errorf("second request's assistant turn begins %s; want the thinking block recorded, %+v", sent.Messages[1].Content[0], first.Content[0])
	}
}

// A refusal is recorded with the response, and the session ends with it.
func TestRefusalIsRecorded(t *testing.T) {
	js, _ := start(t, func(modeltest.Conversation) (modeltest.Turn, error) {
		return modeltest.Turn{Refusal: "I can't help with that."}, nil
	})
	session := uuid.New()
	request(t, js, session, "something bad")
	completion(t, js, session)
	var resp event.ModelResponded
	if err := json.Unmarshal(sessionEvents(t, js, session, event.TypeModelResponded)[0].Data, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Refusal != "I can't help with that." || resp.StopReason == "" {
		t.Errorf("recorded refusal %q, stop reason %q", resp.Refusal, resp.StopReason)
	}
}
