package core

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/event"
	"corral.dev/pkg/policy"
	"corral.dev/pkg/tool"
)

// configured records a first request that sets what the session runs with.
func (l *log) configured(prompt string, c event.SessionConfig) *log {
	return l.add(&event.SessionRequested{Header: header(event.TypeSessionRequested), Request: uuid.New(), User: "ada", Model: "openai:m", Prompt: prompt, SessionConfig: c})
}

// A session's own configuration only narrows what its tenant's policy
// lets it do: tools it is not offered are refused, tools it asks about
// are held for a reviewer as under a rule that says approve (a rule that
// denies still denies), and its budget lowers the policy's caps.
func TestSessionConfig(t *testing.T) {
	pol, err := policy.Parse([]byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	env := Env{Policy: pol, ApprovalKey: approvalPub, MaxTurns: 10, Now: t0.Add(time.Minute), RequeueAfter: NoRequeue}
	readOnly := event.SessionConfig{Tools: []string{tool.Read, tool.Grep}}
	askBash := event.SessionConfig{Ask: []string{tool.Bash}}
	budget := func(b string) event.SessionConfig { return event.SessionConfig{Budget: json.RawMessage(b)} }
	for _, tc := range []struct {
		name string
		log  *log
		env  func(*Env)
		want string
	}{
		{"a tool offered runs", new(log).configured("hi", readOnly).respond("", "r:Read:"+`{"file_path":"/workspace/x"}`), nil,
			"dispatch r to sandbox"},
		{"a tool not offered is refused, not run", new(log).configured("hi", readOnly).respond("", "a:Bash:"+bashTrue), nil,
			"refuse a: this session is not offered the tool Bash (its tools are Read, Grep), so the call was not run"},
		{"a tool not offered is refused before any reviewer is asked", new(log).configured("hi", readOnly).respond("", "p:Bash:"+bashPush), nil,
			"refuse p: this session is not offered the tool Bash (its tools are Read, Grep), so the call was not run"},
		{"a tool not offered is not queued again", new(log).configured("hi", readOnly).respond("sandbox", "a:Bash:"+bashTrue), func(e *Env) { e.RequeueAfter = 1 },
			""},
		{"a follow-up sets nothing", new(log).configured("hi", readOnly).respond("").request("again").respond("", "a:Bash:"+bashTrue), nil,
			"refuse a: this session is not offered the tool Bash (its tools are Read, Grep), so the call was not run"},
		{"a tool asked about is held", new(log).configured("hi", askBash).respond("", "a:Bash:"+bashTrue, "r:Read:"+`{"file_path":"/workspace/x"}`), nil,
			"hold a (rule session.ask, asked false); dispatch r to sandbox"},
		{"a held call approved runs", new(log).configured("hi", askBash).respond("", "a:Bash:"+bashTrue).asked("a").decided("a", bashTrue, true, approvalKey), nil,
			"dispatch a to sandbox"},
		{"a held call denied is refused", new(log).configured("hi", askBash).respond("", "a:Bash:"+bashTrue).asked("a").decided("a", bashTrue, false, approvalKey), nil,
			"refuse a: a reviewer (rev) denied this call, held under policy rule session.ask: no reason given"},
		{"the policy's deny still wins", new(log).configured("hi", askBash).respond("", "r:Bash:"+bashRm), nil,
			"refuse r: refused by policy (rule no-rm): it deletes"},
		{"the policy's approve keeps its rule", new(log).configured("hi", askBash).respond("", "p:Bash:"+bashPush), nil,
			"hold p (rule push, asked false)"},
		{"without an approval key a call asked about is refused", new(log).configured("hi", askBash).respond("", "a:Bash:"+bashTrue), func(e *Env) { e.ApprovalKey = nil },
			"refuse a: this call needs a reviewer's approval under policy rule session.ask (this session asks a reviewer about every Bash call), and this deployment takes no approvals, so it was not run"},
		{"a budget below the policy's pauses the session", new(log).configured("hi", budget(`{"cost_usd":0.01}`)).respond("", "a:Bash:"+bashTrue), nil,
			"pause session.cost_usd"},
		{"a budget above the policy's is capped at it", new(log).configured("hi", budget(`{"wall_time":"10h0m0s"}`)), func(e *Env) { e.Now = t0.Add(2 * time.Hour) },
			"pause session.wall_time"},
		{"a cap the policy does not set counts", new(log).configured("hi", budget(`{"tokens":15}`)).respond("", "a:Bash:"+bashTrue), nil,
			"pause session.tokens"},
		{"a raise approved lifts the session's own cap", new(log).configured("hi", budget(`{"cost_usd":0.01}`)).respond("", "a:Bash:"+bashTrue).paused("session.cost_usd", time.Second).
			raise(raise1, `{"cost_usd":0.5}`).raiseDecided(raise1, `{"cost_usd":0.5}`, true, approvalKey), nil,
			"resume by rev"},
		{"a budget that does not read fails the session", new(log).configured("hi", budget(`{"cost":1}`)), nil,
			"fail invalid_request "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := env
			if tc.env != nil {
				tc.env(&e)
			}
			if got := show(Next(tc.log.fold(), e)); got != tc.want {
				t.Errorf("Next =\n  %s\nwant\n  %s", got, tc.want)
			}
		})
	}
}

// The model is offered the session's tools alone, in Corral's order.
func TestSpecsOfferTheSessionsTools(t *testing.T) {
	names := func(specs []tool.Spec) []string {
		var out []string
		for _, s := range specs {
			out = append(out, s.Name)
		}
		return out
	}
	all := new(log).request("hi").fold()
	if got := names(all.Specs()); !slices.Equal(got, tool.Names()) {
		t.Errorf("a session with no tools set is offered %v, want %v", got, tool.Names())
	}
	some := new(log).configured("hi", event.SessionConfig{Tools: []string{tool.Grep, tool.Read}}).fold()
	if got := names(some.Specs()); !slices.Equal(got, []string{tool.Read, tool.Grep}) {
		t.Errorf("a session offered Grep and Read is offered %v", got)
	}
	if got := names(tool.Specs()); !slices.Equal(got, tool.Names()) {
		t.Errorf("the shared specs changed: %v", got)
	}
}
