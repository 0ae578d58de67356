package event

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"corral.dev/pkg/tool"
)

// MaxSystemBytes is the longest a session's own instructions
// ([SessionConfig].System) may be: room for a detailed brief, small beside
// any model's context, which every turn carries.
const MaxSystemBytes = 32 << 10

// SessionConfig is what a session runs with beyond its tenant's policy,
// set by its first request (an API agent's configuration, say) and
// recorded in its log, so that a harness rebuilding the session after a
// crash runs it the same way. Its zero value is a session as its tenant's
// policy alone runs it. Nothing in it widens what the policy allows: it
// only narrows what the session may do.
type SessionConfig struct {
	// System is the session's own instructions, added after Corral's
	// system prompt, which still names the tools, /memories and /skills.
	// At most MaxSystemBytes.
	System string `json:"system,omitempty"`
	// Tools are the tools the session is offered, of Corral's six
	// ([tool.Names]); empty means all of them. A call of any other is
	// refused, not run.
	Tools []string `json:"tools,omitempty"`
	// Ask are tools every call of which waits for a reviewer, as under a
	// policy rule that says approve; a rule that denies a call still
	// denies it.
	Ask []string `json:"ask,omitempty"`
	// Budget is the session's own caps, as pkg/policy.Limits writes them
	// ({"cost_usd": 2.5, "wall_time": "1h"}): each lowers its tenant's
	// cap for the session, and one above it counts as the tenant's.
	Budget json.RawMessage `json:"budget,omitempty"`
}

// IsZero reports whether c sets nothing: a session run by its tenant's
// policy alone.
func (c *SessionConfig) IsZero() bool {
	return c.System == "" && len(c.Tools) == 0 && len(c.Ask) == 0 && len(c.Budget) == 0
}

// Check says what is wrong with c, but for its budget, which only
// pkg/policy reads: instructions too long or not UTF-8, a tool that is
// none of Corral's or named twice, a tool to ask about that the session
// is not offered.
func (c *SessionConfig) Check() error {
	var problems []string
	switch {
	case len(c.System) > MaxSystemBytes:
		problems = append(problems, fmt.Sprintf("system is %d bytes; the limit is %d", len(c.System), MaxSystemBytes))
	case !utf8.ValidString(c.System):
		problems = append(problems, "system is not valid UTF-8")
	}
	for _, f := range []struct {
		field string
		names []string
	}{{"tools", c.Tools}, {"ask", c.Ask}} {
		for i, name := range f.names {
			switch {
			case !slices.Contains(tool.Names(), name):
				problems = append(problems, fmt.Sprintf("%s: %q is none of Corral's tools (%s)", f.field, name, strings.Join(tool.Names(), ", ")))
			case slices.Contains(f.names[:i], name):
				problems = append(problems, fmt.Sprintf("%s: %s is named twice", f.field, name))
			}
		}
	}
	for _, name := range c.Ask {
		if !c.Offers(name) {
			problems = append(problems, fmt.Sprintf("ask: %s is not among the session's tools (%s)", name, strings.Join(c.Tools, ", ")))
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// Offers reports whether the session is offered the tool name.
func (c *SessionConfig) Offers(name string) bool {
	return len(c.Tools) == 0 || slices.Contains(c.Tools, name)
}

// Asks reports whether every call of the tool name waits for a reviewer.
func (c *SessionConfig) Asks(name string) bool {
	return slices.Contains(c.Ask, name)
}
