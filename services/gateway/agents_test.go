package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"corral.dev/pkg/event"
	"corral.dev/pkg/policy"
	"corral.dev/pkg/tool"
)

// TestAgentsRefuseWhatCorralCannotHonour checks that an agent's fields are
// taken when Corral runs them as asked (its system prompt, which of
// Corral's tools its sessions are offered, which of them a reviewer
// approves), and refused with the API's error shape, saying what is not
// supported, otherwise: never dropped.
func TestAgentsRefuseWhatCorralCannotHonour(t *testing.T) {
	t.Parallel()
	toolset := func(s string) string { return `"tools": [{"type": "agent_toolset_20260401"` + s + `}]` }
	tests := []struct {
		name, body string
		// model is the model the agent runs; empty when it is refused.
		model string
		// system, tools and ask are what its sessions run with (tools
		// and ask joined by commas; no tools: all six).
		system, tools, ask string
	}{
		{"an Anthropic model", `{"name": "a", "model": "claude-sonnet-4-6"}`, "anthropic:claude-sonnet-4-6", "", "", ""},
		{"a model object", `{"name": "a", "model": {"id": "claude-sonnet-4-6"}}`, "anthropic:claude-sonnet-4-6", "", "", ""},
		{"a provider's model", `{"name": "a", "model": "openai:gpt-4.1"}`, "openai:gpt-4.1", "", "", ""},
		{"the toolset", `{"name": "a", "model": "m", ` + toolset(`, "default_config": {"enabled": true, "permission_policy": {"type": "always_allow"}}`) + `}`, "anthropic:m", "", "", ""},
		{"each tool allowed", `{"name": "a", "model": "m", ` + toolset(`, "configs": [{"name": "bash", "type": "bash", "enabled": true}, {"name": "web_fetch", "enabled": false}]`) + `}`, "anthropic:m", "", "", ""},
		{"an empty system prompt", `{"name": "a", "model": "m", "system": ""}`, "anthropic:m", "", "", ""},
		{"a system prompt", `{"name": "a", "model": "m", "system": "be brief"}`, "anthropic:m", "be brief", "", ""},
		{"a tool disabled", `{"name": "a", "model": "m", ` + toolset(`, "configs": [{"name": "bash", "enabled": false}]`) + `}`, "anthropic:m", "", "Read,Write,Edit,Glob,Grep", ""},
		{"tools enabled one by one", `{"name": "a", "model": "m", ` + toolset(`, "default_config": {"enabled": false}, "configs": [{"name": "grep", "enabled": true}, {"name": "read", "enabled": true}]`) + `}`, "anthropic:m", "", "Read,Grep", ""},
		{"always ask", `{"name": "a", "model": "m", ` + toolset(`, "configs": [{"name": "bash", "permission_policy": {"type": "always_ask"}}]`) + `}`, "anthropic:m", "", "", "Bash"},
		{"always ask by default, but for one", `{"name": "a", "model": "m", ` + toolset(`, "default_config": {"permission_policy": {"type": "always_ask"}}, "configs": [{"name": "read", "permission_policy": {"type": "always_allow"}}, {"name": "glob", "enabled": false}]`) + `}`, "anthropic:m", "", "Bash,Read,Write,Edit,Grep", "Bash,Write,Edit,Grep"},
		{"no tools", `{"name": "a", "model": "m", "tools": []}`, "", "", "", ""},
		{"every tool disabled", `{"name": "a", "model": "m", ` + toolset(`, "default_config": {"enabled": false}`) + `}`, "", "", "", ""},
		{"two toolsets", `{"name": "a", "model": "m", "tools": [{"type": "agent_toolset_20260401"}, {"type": "agent_toolset_20260401"}]}`, "", "", "", ""},
		{"a tool Corral has not", `{"name": "a", "model": "m", ` + toolset(`, "configs": [{"name": "web_search"}]`) + `}`, "", "", "", ""},
		{"a permission policy Corral has not", `{"name": "a", "model": "m", ` + toolset(`, "configs": [{"name": "bash", "permission_policy": {"type": "always_deny"}}]`) + `}`, "", "", "", ""},
		{"a custom tool", `{"name": "a", "model": "m", "tools": [{"type": "custom", "name": "x"}]}`, "", "", "", ""},
		{"MCP servers", `{"name": "a", "model": "m", "mcp_servers": [{"type": "url", "url": "https://x"}]}`, "", "", "", ""},
		{"skills", `{"name": "a", "model": "m", "skills": [{"type": "anthropic", "skill_id": "x"}]}`, "", "", "", ""},
		{"an effort", `{"name": "a", "model": {"id": "m", "effort": "high"}}`, "", "", "", ""},
		{"agents calling agents", `{"name": "a", "model": "m", "multiagent": {"type": "coordinator"}}`, "", "", "", ""},
		{"a model's field Corral does not know", `{"name": "a", "model": {"id": "m", "temperature": 0}}`, "", "", "", ""},
		{"a toolset's field Corral does not know", `{"name": "a", "model": "m", ` + toolset(`, "max_calls": 3`) + `}`, "", "", "", ""},
		{"a tool's field Corral does not know", `{"name": "a", "model": "m", ` + toolset(`, "configs": [{"name": "bash", "timeout": 5}]`) + `}`, "", "", "", ""},
		{"a permission policy's field Corral does not know", `{"name": "a", "model": "m", ` + toolset(`, "configs": [{"name": "bash", "permission_policy": {"type": "always_ask", "timeout": 5}}]`) + `}`, "", "", "", ""},
	}
	for _, tc := range tests {
		var b agentBody
		if err := json.Unmarshal([]byte(tc.body), &b); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var a agentRecord
		err := b.apply(&a)
		if tc.model != "" {
			if err != nil || a.Model != tc.model || a.System != tc.system || strings.Join(a.Tools, ",") != tc.tools || strings.Join(a.Ask, ",") != tc.ask {
				t.Errorf("%s: model %q system %q tools %v ask %v, %v; want %s %q tools %q ask %q", tc.name, a.Model, a.System, a.Tools, a.Ask, err, tc.model, tc.system, tc.tools, tc.ask)
			}
			continue
		}
		var ae *apiError
		if !errors.As(err, &ae) || ae.status != http.StatusBadRequest || !strings.Contains(ae.msg, "not supported") {
			t.Errorf("%s: %v, want a 400 saying what is not supported", tc.name, err)
		}
	}
}

// TestAgentShowsItsConfiguration checks that an agent shows its system
// prompt and each of Corral's tools with whether it is enabled and its
// permission policy, as the API does, and that what it shows, sent back,
// configures the same agent.
func TestAgentShowsItsConfiguration(t *testing.T) {
	t.Parallel()
	a := agentRecord{Name: "a", ModelID: "m", Model: "anthropic:m", System: "be brief", Tools: []string{"Bash", "Read", "Grep"}, Ask: []string{"Bash"}}
	shown := agentJSON(a)
	if shown.System != "be brief" || len(shown.Tools) != 1 {
		t.Fatalf("shown: system %q, %d toolsets", shown.System, len(shown.Tools))
	}
	var got []string
	for _, c := range shown.Tools[0].Configs {
		got = append(got, fmt.Sprintf("%s:%v:%s", c.Name, c.Enabled, c.PermissionPolicy.Type))
	}
	want := []string{"bash:true:always_ask", "read:true:always_allow", "write:false:always_allow", "edit:false:always_allow", "glob:false:always_allow", "grep:true:always_allow"}
	if !slices.Equal(got, want) {
		t.Errorf("tools shown as %v, want %v", got, want)
	}
	body, err := json.Marshal(map[string]any{"name": "a", "model": shown.Model, "system": shown.System, "tools": shown.Tools})
	if err != nil {
		t.Fatal(err)
	}
	var b agentBody
	if err := json.Unmarshal(body, &b); err != nil {
		t.Fatal(err)
	}
	var again agentRecord
	if err := b.apply(&again); err != nil || again.System != a.System || !slices.Equal(again.Tools, a.Tools) || !slices.Equal(again.Ask, a.Ask) {
		t.Errorf("sent back: %+v, %v; want %+v", again, err, a)
	}
	if err := (&agentBody{System: ptr(strings.Repeat("x", event.MaxSystemBytes+1))}).apply(&again); err == nil || !strings.Contains(err.Error(), "the most is 32768") {
		t.Errorf("a system prompt over 32 KiB: %v, want it refused", err)
	}
}

// TestSessionBudget checks that a session's budget, as the API takes it
// (a ceiling of list cost in cents), becomes the session's own cap of
// cost, shown back as it came; and that one Corral cannot enforce is
// refused.
func TestSessionBudget(t *testing.T) {
	t.Parallel()
	prices, err := policy.Parse([]byte("prices: {\"anthropic:m\": {input: 1, output: 2}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, budget, model string
		// limits are the caps it carries; empty when refused.
		limits string
	}{
		{"none", `null`, "anthropic:m", ""},
		{"a ceiling", `{"type": "limit", "max_list_cost": {"amount": "2550", "currency": "USD"}}`, "anthropic:m", `{"cost_usd":25.5}`},
		{"an amount with a leading zero", `{"type": "limit", "max_list_cost": {"amount": "0250", "currency": "USD"}}`, "anthropic:m", ""},
		{"dollars", `{"type": "limit", "max_list_cost": {"amount": "25.50", "currency": "USD"}}`, "anthropic:m", ""},
		{"nothing to spend", `{"type": "limit", "max_list_cost": {"amount": "0", "currency": "USD"}}`, "anthropic:m", ""},
		{"euros", `{"type": "limit", "max_list_cost": {"amount": "2500", "currency": "EUR"}}`, "anthropic:m", ""},
		{"another type", `{"type": "tokens", "max_list_cost": {"amount": "2500", "currency": "USD"}}`, "anthropic:m", ""},
		{"no ceiling", `{"type": "limit"}`, "anthropic:m", ""},
		{"a field Corral does not know", `{"type": "limit", "max_list_cost": {"amount": "2500", "currency": "USD"}, "soft": true}`, "anthropic:m", ""},
		{"a model with no price", `{"type": "limit", "max_list_cost": {"amount": "2500", "currency": "USD"}}`, "openai:free", ""},
	} {
		shown, limits, err := readBudget(json.RawMessage(tc.budget), tc.model, prices)
		switch {
		case tc.name == "none":
			if shown != nil || limits != nil || err != nil {
				t.Errorf("%s: %+v %s %v, want no budget", tc.name, shown, limits, err)
			}
		case tc.limits != "":
			if err != nil || string(limits) != tc.limits || shown == nil || shown.MaxListCost.Amount != "2550" || shown.MaxListCost.Currency != "USD" || shown.Type != "limit" {
				t.Errorf("%s: %+v %s %v, want %s shown back as it came", tc.name, shown, limits, err, tc.limits)
			}
			out, _ := json.Marshal(sessionJSON("acme", &sessionRecord{Budget: shown}, nil))
			if !strings.Contains(string(out), `"budget":{"type":"limit","max_list_cost":{"amount":"2550","currency":"USD"}}`) {
				t.Errorf("%s: the session shows %s, want its budget", tc.name, out)
			}
		default:
			var ae *apiError
			if !errors.As(err, &ae) || ae.status != http.StatusBadRequest {
				t.Errorf("%s: %v, want a 400", tc.name, err)
			}
		}
	}
}

func ptr[T any](v T) *T { return &v }

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
