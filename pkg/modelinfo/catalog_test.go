package modelinfo

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestLookup(t *testing.T) {
	t.Parallel()
	c := Default()
	for _, tc := range []struct {
		name, entry string
		window      int
		can         []string
	}{
		{"anthropic:claude-sonnet-4-5-20250929", "anthropic:claude-sonnet-4", 200000, []string{Thinking}},
		{"anthropic:claude-opus-4-1", "anthropic:claude-opus-4", 200000, []string{Thinking}},
		{"anthropic:claude-opus-4-5", "anthropic:claude-opus-4-5", 200000, []string{Thinking}},
		{"anthropic:claude-haiku-4-5", "anthropic:claude-haiku-4", 200000, []string{Thinking}},
		{"anthropic:claude-3-5-haiku-latest", "anthropic:claude-3-5", 200000, nil},
		{"openai:gpt-5-mini", "openai:gpt-5", 400000, []string{ReasoningEffort, MaxCompletionTokens}},
		{"openai:gpt-5-chat-latest", "openai:gpt-5-chat", 128000, []string{MaxCompletionTokens}},
		{"openai:gpt-4.1-mini", "openai:gpt-4.1", 1047576, nil},
		{"openai:gpt-4o", "openai:gpt-4o", 128000, nil},
		{"openai:o4-mini-2025-04-16", "openai:o4-mini", 200000, []string{ReasoningEffort, MaxCompletionTokens}},
		{"openai:llama3:8b", "*", 128000, nil},
		// The provider is part of the name: a model of one provider is
		// never another's.
		{"openai:claude-sonnet-4", "*", 128000, nil},
	} {
		got := c.Lookup(tc.name)
		if got.Entry != tc.entry || got.ContextWindow != tc.window || !slices.Equal(got.Capabilities, tc.can) {
			t.Errorf("Lookup(%q) = %+v, want entry %q, window %d, capabilities %v", tc.name, got, tc.entry, tc.window, tc.can)
		}
	}
	// Every entry's output fits in its window.
	for k, v := range c.entries {
		if v.ContextWindow <= 0 || v.MaxOutput >= v.ContextWindow {
			t.Errorf("%s: window %d, max output %d", k, v.ContextWindow, v.MaxOutput)
		}
	}
}

// A catalog file changes what it names and nothing else; what an entry
// leaves out is what the built-in table says of the name.
func TestLoadOverrides(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "models.yaml")
	if err := os.WriteFile(file, []byte(`
"openai:gpt-test": {context_window: 20000}
"anthropic:claude-sonnet-4-5": {context_window: 1000000}
"openai:o3": {capabilities: []}
"*": {context_window: 32000, max_output: 4096}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name           string
		window, output int
		can            []string
	}{
		{"openai:gpt-test", 20000, 0, nil},
		{"anthropic:claude-sonnet-4-5-20250929", 1000000, 64000, []string{Thinking}},
		{"anthropic:claude-sonnet-4-20250514", 200000, 64000, []string{Thinking}},
		{"openai:o3-mini", 200000, 100000, []string{}},
		{"openai:gpt-4o", 128000, 16384, nil},
		{"openai:local", 32000, 4096, nil},
	} {
		got := c.Lookup(tc.name)
		if got.ContextWindow != tc.window || got.MaxOutput != tc.output || !slices.Equal(got.Capabilities, tc.can) {
			t.Errorf("Lookup(%q) = %+v, want window %d, max output %d, capabilities %v", tc.name, got, tc.window, tc.output, tc.can)
		}
	}
	if got := Default().Lookup("openai:local").ContextWindow; got != 128000 {
		t.Errorf("loading a file changed the built-in table: window %d", got)
	}
}

func TestLoadRejects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, file, want string }{
		{"no provider", `"gpt-4o": {context_window: 1000}`, "openai:<model> or anthropic:<model>"},
		{"unknown provider", `"mistral:large": {context_window: 1000}`, "openai:<model> or anthropic:<model>"},
		{"negative", `"openai:x": {context_window: -1}`, "not negative"},
		{"output past the window", `"openai:x": {context_window: 1000, max_output: 1000}`, "leaves no room"},
		{"output past the inherited window", `"openai:gpt-5": {context_window: 20000}`, "leaves no room"},
		{"unknown capability", `"openai:x": {capabilities: [vision]}`, `unknown capability "vision"`},
		{"unknown field", `"openai:x": {window: 1000}`, "field window not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "models.yaml")
			if err := os.WriteFile(file, []byte(tc.file), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Load(file)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), file) {
				t.Errorf("Load = %v, want an error naming %s and saying %q", err, file, tc.want)
			}
		})
	}
}
