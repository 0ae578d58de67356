package event_test

import (
	"crypto/ed25519"
	"encoding/json"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/uuid"

	"corral.dev/pkg/event"
	"corral.dev/pkg/model"
	"corral.dev/schemas"
)

// Every Go type has a schema and every schema a Go type.
func TestTypesMatchSchemas(t *testing.T) {
	got := event.Types()
	sort.Strings(got)
	if want := schemas.Types(); !slices.Equal(got, want) {
		t.Fatalf("event types %v\nschemas     %v", got, want)
	}
}

// Each schema's example decodes into its Go type, and encoding that value
// again gives a message that still validates and means the same.
func TestSchemaExamplesRoundTrip(t *testing.T) {
	for _, typ := range schemas.Types() {
		t.Run(typ, func(t *testing.T) {
			examples, err := schemas.Examples(typ)
			if err != nil {
				t.Fatal(err)
			}
			for _, ex := range examples {
				v, err := event.Parse(ex)
				if err != nil {
					t.Fatalf("parse example: %v", err)
				}
				out, err := json.Marshal(v)
				if err != nil {
					t.Fatal(err)
				}
				if err := schemas.Validate(typ, out); err != nil {
					t.Fatalf("re-encoded example does not validate: %v\n%s", err, out)
				}
				var a, b any
				_ = json.Unmarshal(ex, &a)
				_ = json.Unmarshal(out, &b)
				if !reflect.DeepEqual(a, b) {
					t.Errorf("round trip changed the example:\n got %s\nwant %s", out, ex)
				}
			}
		})
	}
}

// Messages as our code builds them validate against their schemas.
func TestBuiltMessagesValidate(t *testing.T) {
	s := uuid.Must(uuid.NewV7())
	call := uuid.Must(uuid.NewV7())
	code := 0
	msgs := []event.Event{
		&event.Request{Header: event.NewHeader(event.TypeRequest, "acme", s), User: "ada", Prompt: "hi"},
		&event.SessionRequested{Header: event.NewHeader(event.TypeSessionRequested, "acme", s), Request: uuid.Must(uuid.NewV7()), User: "ada", Model: "openai:gpt-4.1", Prompt: "hi"},
		&event.ModelResponded{Header: event.NewHeader(event.TypeModelResponded, "acme", s), Turn: 1, Model: "openai:gpt-4.1",
			Content: []model.Block{{Type: model.TextBlock, Text: "done"}}, StopReason: "stop"},
		func() *event.ToolCall {
			c := &event.ToolCall{Header: event.NewHeader(event.TypeToolCall, "acme", s), Call: call, Turn: 1, User: "ada", Name: "Bash", Input: json.RawMessage(`{"command":"true"}`)}
			_, key, _ := ed25519.GenerateKey(nil)
			c.Sign(key, "sandbox")
			return c
		}(),
		&event.ToolDispatched{Header: event.NewHeader(event.TypeToolDispatched, "acme", s), Call: call, Turn: 1, Name: "Bash", Summary: `{"command":"true"}`, Service: "sandbox"},
		&event.ToolCompleted{Header: event.NewHeader(event.TypeToolCompleted, "acme", s), Call: call, Name: "Bash", ExitCode: &code},
		&event.SessionCompleted{Header: event.NewHeader(event.TypeSessionCompleted, "acme", s), Answer: "done", Turns: 1},
		&event.SessionFailed{Header: event.NewHeader(event.TypeSessionFailed, "acme", s), Code: event.CodeUnknownModel, Reason: "no"},
		&event.SessionPaused{Header: event.NewHeader(event.TypeSessionPaused, "acme", s), Budget: "session.tokens", Reason: "over",
			Usage: event.BudgetUsage{Steps: 2, InputTokens: 10, OutputTokens: 5, WallTime: "3s"}, Resume: "corral raise --tenant acme x --tokens 10 --reason why"},
		&event.SessionResumed{Header: event.NewHeader(event.TypeSessionResumed, "acme", s), Raise: call, Reviewer: "grace"},
		&event.Offloaded{Header: event.NewHeader(event.TypeOffloaded, "acme", s), Of: event.TypeToolCompleted, Object: "sha256-" + strings.Repeat("0", 64), Size: 20000},
		&event.ContextCompacted{Header: event.NewHeader(event.TypeContextCompacted, "acme", s), Turn: 9, ClearedThrough: 6, TokensBefore: 9000, TokensAfter: 4000},
		&event.ContextCompacted{Header: event.NewHeader(event.TypeContextCompacted, "acme", s), Turn: 9, ClearedThrough: 6, SummarizedThrough: 4, Summary: "so far",
			Model: "openai:gpt-4.1", Usage: model.Usage{InputTokens: 3000, OutputTokens: 200}, User: "ada", TokensBefore: 9000, TokensAfter: 2000},
	}
	for _, m := range msgs {
		typ := m.Head().Type
		t.Run(typ, func(t *testing.T) {
			data, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			if err := schemas.Validate(typ, data); err != nil {
				t.Errorf("%s does not validate: %v\n%s", typ, err, data)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	tests := []struct{ name, data string }{
		{"not json", `{`},
		{"unknown type", `{"type":"corral.nope.v1.x"}`},
		{"wrong field type", `{"type":"corral.tool.v1.completed","call":"not-a-uuid"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := event.Parse([]byte(tc.data)); err == nil {
				t.Error("got nil error")
			}
		})
	}
}

func TestCheckTenant(t *testing.T) {
	for _, ok := range []string{"acme", "a", "team-1_x"} {
		if err := event.CheckTenant(ok); err != nil {
			t.Errorf("CheckTenant(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "Acme", "a.b", "a*", ">", "-a", string(make([]byte, 64))} {
		if err := event.CheckTenant(bad); err == nil {
			t.Errorf("CheckTenant(%q) = nil, want error", bad)
		}
	}
}

// A call's hash is the same for the model's bytes and for the bytes the
// session log keeps of them.
func TestArgsHashOfTheLoggedInput(t *testing.T) {
	for _, in := range []string{
		`{"command": "ls -la && cat <a >b"}`,
		"{\n  \"command\" : \"echo \u2028 done\"\n}",
		`{"command":"true"}`,
	} {
		logged, err := json.Marshal(struct {
			Input json.RawMessage `json:"input"`
		}{json.RawMessage(in)})
		if err != nil {
			t.Fatal(err)
		}
		var back struct {
			Input json.RawMessage `json:"input"`
		}
		if err := json.Unmarshal(logged, &back); err != nil {
			t.Fatal(err)
		}
		if a, b := event.ArgsHash("Bash", json.RawMessage(in)), event.ArgsHash("Bash", back.Input); a != b {
			t.Errorf("%q: hash of the model's bytes %s, of the logged ones (%s) %s", in, a, back.Input, b)
		}
	}
	if event.ArgsHash("Bash", json.RawMessage(`{"command":"ls"}`)) == event.ArgsHash("Bash", json.RawMessage(`{"command":"rm"}`)) {
		t.Error("different inputs hash alike")
	}
}
