package gateway

import (
	"cmp"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"corral.dev/pkg/event"
	"corral.dev/pkg/policy"
	"corral.dev/pkg/tool"
	"corral.dev/services/gateway/internal/wire"
)

// corralTools are the API's names of Corral's six tools, in the order of
// [tool.Names], whose names they are in lower case.
var corralTools = []string{"bash", "read", "write", "edit", "glob", "grep"}

// Permission policies of a tool in the API: always_allow leaves a call to
// the tenant's policy; always_ask has a reviewer approve every call (the
// tenant's policy may still deny it).
const (
	alwaysAllow = "always_allow"
	alwaysAsk   = "always_ask"
)

// toolConfig is a tool's configuration in the API's toolset, or the
// toolset's default (Name and Type empty).
type toolConfig struct {
	Type             string          `json:"type"`
	Name             string          `json:"name"`
	Enabled          *bool           `json:"enabled"`
	PermissionPolicy json.RawMessage `json:"permission_policy"`
}

// readToolset returns what an agent's tools, as the API gives them, make
// of Corral's six: the tools its sessions are offered (nil: all six) and
// those every call of which a reviewer approves, by Corral's names. It
// refuses a toolset other than Corral's, a second one, a tool Corral does
// not have (enabled), a permission policy it cannot honour, and no tool
// enabled at all.
func readToolset(toolsets []json.RawMessage) (tools, ask []string, err error) {
	switch {
	case len(toolsets) == 0:
		return nil, nil, unsupported("tools: an agent without tools (a session is offered at least one of Corral's six)")
	case len(toolsets) > 1:
		return nil, nil, unsupported("tools[1]: a second toolset (Corral's six tools are one %s)", wire.ToolsetType)
	}
	var ts struct {
		Type          string       `json:"type"`
		DefaultConfig *toolConfig  `json:"default_config"`
		Configs       []toolConfig `json:"configs"`
	}
	if err := json.Unmarshal(toolsets[0], &ts); err != nil {
		return nil, nil, badRequest("tools[0]: %v", err)
	}
	if ts.Type != wire.ToolsetType {
		return nil, nil, unsupported("tools[0]: a tool of type %q (sessions are offered Corral's six tools, the %s toolset)", ts.Type, wire.ToolsetType)
	}
	if err := strict(toolsets[0], &ts); err != nil {
		return nil, nil, prefixed(err, "tools[0]: ")
	}
	enabled, asks := true, false
	if d := ts.DefaultConfig; d != nil {
		if enabled, asks, err = d.read("tools[0].default_config", enabled, asks); err != nil {
			return nil, nil, err
		}
	}
	on := make(map[string]bool)
	asked := make(map[string]bool)
	for _, name := range corralTools {
		on[name], asked[name] = enabled, asks
	}
	seen := make(map[string]bool)
	for i, c := range ts.Configs {
		where := fmt.Sprintf("tools[0].configs[%d]", i)
		name := cmp.Or(c.Name, c.Type)
		if seen[name] {
			return nil, nil, badRequest("%s: the tool %q is configured twice", where, name)
		}
		seen[name] = true
		e, a, err := c.read(where, enabled, asks)
		if err != nil {
			return nil, nil, err
		}
		if !slices.Contains(corralTools, name) {
			if e {
				return nil, nil, unsupported("%s: the tool %q (Corral's are %s)", where, name, strings.Join(corralTools, ", "))
			}
			continue // a tool Corral has not, disabled: as asked
		}
		on[name], asked[name] = e, a
	}
	for i, name := range corralTools {
		if on[name] {
			tools = append(tools, tool.Names()[i])
			if asked[name] {
				ask = append(ask, tool.Names()[i])
			}
		}
	}
	switch len(tools) {
	case 0:
		return nil, nil, unsupported("tools[0]: every tool disabled (a session is offered at least one of Corral's six)")
	case len(corralTools):
		tools = nil // all of them, as a session with no tools set is offered
	}
	return tools, ask, nil
}

// read returns whether c enables its tool and has a reviewer approve
// every call, given the toolset's defaults.
func (c toolConfig) read(where string, enabled, asks bool) (bool, bool, error) {
	if c.Enabled != nil {
		enabled = *c.Enabled
	}
	if !present(c.PermissionPolicy) {
		return enabled, asks, nil
	}
	var p struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(c.PermissionPolicy, &p); err != nil {
		return false, false, badRequest("%s.permission_policy: %v", where, err)
	}
	if err := strict(c.PermissionPolicy, &p); err != nil {
		return false, false, prefixed(err, where+".permission_policy: ")
	}
	switch p.Type {
	case alwaysAllow:
		return enabled, false, nil
	case alwaysAsk:
		return enabled, true, nil
	}
	return false, false, unsupported("%s.permission_policy %q (Corral's are %s and %s)", where, p.Type, alwaysAllow, alwaysAsk)
}

// toolsetJSON is the toolset of an agent whose sessions are offered tools
// (nil: all six) and have a reviewer approve every call of ask, as the
// API shows it: each of Corral's tools configured.
func toolsetJSON(tools, ask []string) wire.Toolset {
	ts := wire.Toolset{Type: wire.ToolsetType, DefaultConfig: wire.ToolConfig{Enabled: true, PermissionPolicy: wire.Policy{Type: alwaysAllow}}}
	c := event.SessionConfig{Tools: tools, Ask: ask}
	for i, name := range corralTools {
		perm := alwaysAllow
		if c.Asks(tool.Names()[i]) {
			perm = alwaysAsk
		}
		ts.Configs = append(ts.Configs, wire.ToolConfig{Type: name, Name: name, Enabled: c.Offers(tool.Names()[i]), PermissionPolicy: wire.Policy{Type: perm}})
	}
	return ts
}

// checkSystem refuses an agent's system prompt that a session could not
// run with.
func checkSystem(system string) error {
	switch {
	case len(system) > event.MaxSystemBytes:
		return badRequest("system: %d bytes; the most is %d", len(system), event.MaxSystemBytes)
	case !utf8.ValidString(system):
		return badRequest("system: not valid UTF-8")
	}
	return nil
}

// minorUnits is an amount of the API's money: an integer in minor units,
// with no leading zeros.
var minorUnits = regexp.MustCompile(`^(0|[1-9][0-9]{0,11})$`)

// readBudget reads a new session's budget, as the API takes it, for a
// session of modelName: its spend ceiling as the API shows it, and the
// session's own caps, as pkg/policy.Limits writes them, that carry it to
// the harness (its cost as the tenant's price table, prices, reckons it).
// A ceiling above the tenant's policy's is capped at the policy's.
func readBudget(raw json.RawMessage, modelName string, prices *policy.Policy) (*wire.Budget, json.RawMessage, error) {
	if !present(raw) {
		return nil, nil, nil
	}
	var b struct {
		Type        string `json:"type"`
		MaxListCost *struct {
			Amount   string `json:"amount"`
			Currency string `json:"currency"`
		} `json:"max_list_cost"`
	}
	if err := json.Unmarshal(raw, &b); err != nil {
		return nil, nil, badRequest("budget: %v", err)
	}
	if err := strict(raw, &b); err != nil {
		return nil, nil, prefixed(err, "budget: ")
	}
	switch {
	case b.Type != wire.BudgetType:
		return nil, nil, badRequest("budget: type %q: want %q", b.Type, wire.BudgetType)
	case b.MaxListCost == nil:
		return nil, nil, badRequest("budget: max_list_cost is required")
	case b.MaxListCost.Currency != "USD":
		return nil, nil, unsupported("budget: max_list_cost in %q (Corral's prices are in USD)", b.MaxListCost.Currency)
	case !minorUnits.MatchString(b.MaxListCost.Amount):
		return nil, nil, badRequest("budget: max_list_cost.amount %q: want an amount in cents, as an integer with no leading zeros (\"2500\" is $25.00)", b.MaxListCost.Amount)
	case b.MaxListCost.Amount == "0":
		return nil, nil, badRequest("budget: max_list_cost.amount \"0\": a session that may spend nothing can ask the model nothing")
	case !prices.Priced(modelName):
		return nil, nil, badRequest("budget: model_not_budgetable: the agent's model %s has no price in the tenant's price table, so its cost never reaches a ceiling", modelName)
	}
	cents, err := strconv.ParseInt(b.MaxListCost.Amount, 10, 64)
	if err != nil {
		return nil, nil, badRequest("budget: max_list_cost.amount: %v", err)
	}
	limits, err := json.Marshal(policy.Limits{CostUSD: float64(cents) / 100})
	if err != nil {
		return nil, nil, err
	}
	return &wire.Budget{Type: wire.BudgetType, MaxListCost: wire.Money{Amount: b.MaxListCost.Amount, Currency: "USD"}}, limits, nil
}
