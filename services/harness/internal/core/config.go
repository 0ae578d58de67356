package core

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"corral.dev/pkg/event"
	"corral.dev/pkg/policy"
	"corral.dev/pkg/tool"
)

// Rules a session's own configuration decides a call under, as a policy
// rule would ([Verdict].Rule).
const (
	// RuleTools refuses a call of a tool the session is not offered.
	RuleTools = "session.tools"
	// RuleAsk holds every call of a tool the session's configuration
	// asks a reviewer about.
	RuleAsk = "session.ask"
)

// configure folds in what a session's first request set it to run with.
func (st *State) configure(c event.SessionConfig) {
	st.Config = c
	st.Budget, st.BadBudget = policy.Limits{}, nil
	if len(c.Budget) > 0 {
		if err := json.Unmarshal(c.Budget, &st.Budget); err != nil {
			st.Budget, st.BadBudget = policy.Limits{}, fmt.Errorf("the session's budget %s does not read: %w", c.Budget, err)
		}
	}
}

// Specs returns the specs of the tools the session is offered, in
// [tool.Specs]' order: what the model is asked with.
func (st *State) Specs() []tool.Spec {
	if len(st.Config.Tools) == 0 {
		return tool.Specs()
	}
	return slices.DeleteFunc(slices.Clone(tool.Specs()), func(s tool.Spec) bool { return !st.Config.Offers(s.Name) })
}

// configured applies the session's own configuration to what its
// tenant's policy decided of a call of the tool name: a tool the session
// is not offered is refused; one it asks about is held for a reviewer
// where the policy allows it. It only tightens: the policy's deny and
// approve stand.
func configured(st *State, name string, d policy.Decision) policy.Decision {
	switch {
	case !st.Config.Offers(name):
		return policy.Decision{Decision: policy.Deny, Rule: RuleTools, Reason: fmt.Sprintf("this session is not offered the tool %s (its tools are %s), so the call was not run", name, strings.Join(st.Config.Tools, ", "))}
	case d.Decision == policy.Allow && st.Config.Asks(name):
		return policy.Decision{Decision: policy.Approve, Rule: RuleAsk, Reason: fmt.Sprintf("this session asks a reviewer about every %s call", name)}
	}
	return d
}
