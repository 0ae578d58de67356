package model_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"corral.dev/pkg/model"
)

func TestResolve(t *testing.T) {
	t.Parallel()
	openai := model.NewOpenAI(model.Config{BaseURL: "http://127.0.0.1:11434"})
	anthropic := model.NewAnthropic(model.Config{APIKey: "k"})
	both := model.Providers{OpenAI: openai, Anthropic: anthropic}
	tests := []struct {
		name       string
		providers  model.Providers
		model      string
		wantClient model.Client
		wantModel  string
		wantErr    string
	}{
		{"openai", both, "openai:gpt-4.1", openai, "gpt-4.1", ""},
		{"anthropic", both, "anthropic:claude-sonnet-4-5", anthropic, "claude-sonnet-4-5", ""},
		{"colon in model", both, "openai:llama3.1:8b", openai, "llama3.1:8b", ""},
		{"no prefix", both, "gpt-4.1", nil, "", `unknown model "gpt-4.1": must be openai:<model> or anthropic:<model>`},
		{"unknown prefix", both, "gemini:pro", nil, "", `unknown model "gemini:pro": must be openai:<model> or anthropic:<model>`},
		{"prefix case", both, "OpenAI:gpt-4.1", nil, "", `unknown model "OpenAI:gpt-4.1": must be openai:<model> or anthropic:<model>`},
		{"empty", both, "", nil, "", `unknown model "": must be openai:<model> or anthropic:<model>`},
		{"empty model", both, "anthropic:", nil, "", `unknown model "anthropic:": the model name after "anthropic:" is empty`},
		{"anthropic missing", model.Providers{OpenAI: openai}, "anthropic:claude", nil, "", `model provider not configured for "anthropic:claude": set ANTHROPIC_API_KEY in the harness's environment (corral dev's, with corral dev) and restart it`},
		{"openai missing", model.Providers{Anthropic: anthropic}, "openai:gpt-4.1", nil, "", `model provider not configured for "openai:gpt-4.1": set OPENAI_API_KEY or OPENAI_BASE_URL in the harness's environment (corral dev's, with corral dev) and restart it`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, name, err := tc.providers.Resolve(tc.model)
			if tc.wantErr != "" {
				want := model.ErrUnknownModel
				if tc.providers != both {
					want = model.ErrNotConfigured
				}
				if err == nil || err.Error() != tc.wantErr || !errors.Is(err, want) {
					t.Fatalf("Resolve(%q) error = %v, want %q wrapping %v", tc.model, err, tc.wantErr, want)
				}
				return
			}
			if err != nil {
				t.Fatalf("Resolve(%q): %v", tc.model, err)
			}
			if c != tc.wantClient || name != tc.wantModel {
				t.Errorf("Resolve(%q) = %p, %q; want %p, %q", tc.model, c, name, tc.wantClient, tc.wantModel)
			}
		})
	}
}

func TestSecretNotFormatted(t *testing.T) {
	t.Parallel()
	cfg := model.Config{APIKey: "sk-secret"}
	for _, format := range []string{"%v", "%+v", "%#v", "%s", "%q"} {
		for _, v := range []any{cfg, cfg.APIKey, &cfg} {
			if s := fmt.Sprintf(format, v); strings.Contains(s, "sk-secret") {
				t.Errorf("Sprintf(%q) = %s, which contains the key", format, s)
			}
		}
	}
}
