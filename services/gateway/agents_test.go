package gateway

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"corral.dev/pkg/tool"
)

// TestAgentsRefuseWhatCorralCannotHonour checks that an agent's fields are
// taken when Corral runs them as asked, and refused with the API's error
// shape, saying what is not supported, otherwise: never dropped.
func TestAgentsRefuseWhatCorralCannotHonour(t *testing.T) {
	t.Parallel()
	toolset := func(s string) string { return `"tools": [{"type": "agent_toolset_20260401"` + s + `}]` }
	tests := []struct {
		name, body string
		// model is the model the agent runs; empty when it is refused.
		model string
	}{
		{"an Anthropic model", `{"name": "a", "model": "claude-sonnet-4-6"}`, "anthropic:claude-sonnet-4-6"},
		{"a model object", `{"name": "a", "model": {"id": "claude-sonnet-4-6"}}`, "anthropic:claude-sonnet-4-6"},
		{"a provider's model", `{"name": "a", "model": "openai:gpt-4.1"}`, "openai:gpt-4.1"},
		{"the toolset", `{"name": "a", "model": "m", ` + toolset(`, "default_config": {"enabled": true, "permission_policy": {"type": "always_allow"}}`) + `}`, "anthropic:m"},
		{"each tool allowed", `{"name": "a", "model": "m", ` + toolset(`, "configs": [{"name": "bash", "type": "bash", "enabled": true}, {"name": "web_fetch", "enabled": false}]`) + `}`, "anthropic:m"},
		{"an empty system prompt", `{"name": "a", "model": "m", "system": ""}`, "anthropic:m"},
		{"a system prompt", `{"name": "a", "model": "m", "system": "be brief"}`, ""},
		{"no tools", `{"name": "a", "model": "m", "tools": []}`, ""},
		{"a tool disabled", `{"name": "a", "model": "m", ` + toolset(`, "configs": [{"name": "bash", "enabled": false}]`) + `}`, ""},
		{"every tool disabled", `{"name": "a", "model": "m", ` + toolset(`, "default_config": {"enabled": false}`) + `}`, ""},
		{"a tool Corral has not", `{"name": "a", "model": "m", ` + toolset(`, "configs": [{"name": "web_search"}]`) + `}`, ""},
		{"always ask", `{"name": "a", "model": "m", ` + toolset(`, "configs": [{"name": "bash", "permission_policy": {"type": "always_ask"}}]`) + `}`, ""},
		{"a custom tool", `{"name": "a", "model": "m", "tools": [{"type": "custom", "name": "x"}]}`, ""},
		{"MCP servers", `{"name": "a", "model": "m", "mcp_servers": [{"type": "url", "url": "https://x"}]}`, ""},
		{"skills", `{"name": "a", "model": "m", "skills": [{"type": "anthropic", "skill_id": "x"}]}`, ""},
		{"an effort", `{"name": "a", "model": {"id": "m", "effort": "high"}}`, ""},
		{"agents calling agents", `{"name": "a", "model": "m", "multiagent": {"type": "coordinator"}}`, ""},
		{"a model's field Corral does not know", `{"name": "a", "model": {"id": "m", "temperature": 0}}`, ""},
		{"a toolset's field Corral does not know", `{"name": "a", "model": "m", ` + toolset(`, "max_calls": 3`) + `}`, ""},
		{"a tool's field Corral does not know", `{"name": "a", "model": "m", ` + toolset(`, "configs": [{"name": "bash", "timeout": 5}]`) + `}`, ""},
	}
	for _, tc := range tests {
		var b agentBody
		if err := json.Unmarshal([]byte(tc.body), &b); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var a agentRecord
		err := b.apply(&a)
		if tc.model != "" {
			if err != nil || a.Model != tc.model {
				t.Errorf("%s: model %q, %v; want %s", tc.name, a.Model, err, tc.model)
			}
			continue
		}
		var ae *apiError
		if !errors.As(err, &ae) || ae.status != http.StatusBadRequest || !strings.Contains(ae.msg, "not supported") {
			t.Errorf("%s: %v, want a 400 saying what is not supported", tc.name, err)
		}
	}
}

// TestCorralToolsAreTheSessionsTools checks that the tools an agent may
// name are the tools every session is offered.
func TestCorralToolsAreTheSessionsTools(t *testing.T) {
	t.Parallel()
	var names []string
	for _, s := range tool.Specs() {
		names = append(names, strings.ToLower(s.Name))
	}
	if !slices.Equal(names, corralTools) {
		t.Errorf("sessions are offered %v, agents name %v", names, corralTools)
	}
}

func TestSessionResources(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, resources string
		ref             string
		ok              bool
	}{
		{"none", `[]`, "", true},
		{"a repository at a branch", `[{"type": "github_repository", "url": "https://github.com/acme/app", "checkout": {"type": "branch", "name": "main"}}]`, "main", true},
		{"a repository at a commit", `[{"type": "github_repository", "url": "https://github.com/acme/app", "checkout": {"type": "commit", "sha": "0123456789abcdef0123456789abcdef01234567"}}]`, "0123456789abcdef0123456789abcdef01234567", true},
		{"a token", `[{"type": "github_repository", "url": "https://github.com/acme/app", "authorization_token": "ghp_x"}]`, "", false},
		{"two repositories", `[{"type": "github_repository", "url": "https://github.com/acme/a"}, {"type": "github_repository", "url": "https://github.com/acme/b"}]`, "", false},
		{"a file", `[{"type": "file", "file_id": "f"}]`, "", false},
		{"elsewhere", `[{"type": "github_repository", "url": "https://github.com/acme/a", "mount_path": "/src"}]`, "", false},
		{"a field Corral does not know", `[{"type": "github_repository", "url": "https://github.com/acme/a", "sparse_paths": ["src"]}]`, "", false},
		{"a checkout's field Corral does not know", `[{"type": "github_repository", "url": "https://github.com/acme/a", "checkout": {"type": "branch", "name": "main", "depth": 1}}]`, "", false},
	} {
		var raw []json.RawMessage
		if err := json.Unmarshal([]byte(tc.resources), &raw); err != nil {
			t.Fatal(err)
		}
		repo, err := repository(raw)
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case !tc.ok && err == nil:
			t.Errorf("%s: taken, want refused", tc.name)
		case tc.ok && tc.ref != "" && (repo == nil || repo.Ref != tc.ref):
			t.Errorf("%s: %+v, want ref %s", tc.name, repo, tc.ref)
		}
	}
}

// TestNestedFieldsAreRefused checks that a field Corral does not know is
// refused inside the parts of a body read by their type (a new session's
// initial events and agent, an environment's config), as it is at the
// top of a body: never dropped.
func TestNestedFieldsAreRefused(t *testing.T) {
	t.Parallel()
	refused := func(what string, err error) {
		t.Helper()
		var ae *apiError
		if !errors.As(err, &ae) || ae.status != http.StatusBadRequest || !strings.Contains(ae.msg, "not supported") {
			t.Errorf("%s: %v, want a 400 saying what is not supported", what, err)
		}
	}
	if _, err := initialMessages([]json.RawMessage{json.RawMessage(`{"type": "user.message", "content": [{"type": "text", "text": "hi"}]}`)}); err != nil {
		t.Errorf("a message: %v", err)
	}
	_, err := initialMessages([]json.RawMessage{json.RawMessage(`{"type": "user.message", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}`)})
	refused("a text block's cache_control", err)
	_, err = initialMessages([]json.RawMessage{json.RawMessage(`{"type": "user.message", "content": [{"type": "text", "text": "hi"}], "priority": 1}`)})
	refused("a message's field Corral does not know", err)

	var s Service
	_, err = s.sessionAgent(t.Context(), nil, json.RawMessage(`{"type": "agent", "id": "agent_1", "overrides": {"model": "m"}}`))
	refused("an agent reference's field Corral does not know", err)

	body := environmentBody{Config: json.RawMessage(`{"type": "cloud", "networking": {"type": "limited", "allowed_hosts": ["x.example"], "allowed_ports": [443]}}`)}
	_, err = body.spec(nil)
	refused("a network's field Corral does not know", err)
	body.Config = json.RawMessage(`{"type": "cloud", "networking": {"type": "limited", "allowed_hosts": ["x.example"]}}`)
	if _, err := body.spec(nil); err != nil {
		t.Errorf("a limited network: %v", err)
	}
}
