package core

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/event"
	"corral.dev/pkg/model"
	"corral.dev/pkg/policy"
)

const testPolicy = `
rules:
  - name: no-rm
    when: tool == "Bash" && args.command.matches("rm -rf")
    decision: deny
    reason: it deletes
  - name: push
    when: tool == "Bash" && args.command.matches("git push")
    decision: approve
    reason: it pushes
budgets:
  session:
    steps: 5
    cost_usd: 1
    wall_time: 1h
  user_daily:
    cost_usd: 10
prices:
  "openai:m": {input: 1000, output: 1000}
`

var (
	approvalPub, approvalKey, _ = ed25519.GenerateKey(nil)
	session                     = uuid.MustParse("01a20000-0000-7000-8000-000000000001")
	t0                          = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
)

// log builds a session's events, each at the next sequence.
type log struct {
	events []any
	calls  map[string]event.Call // by tool_use ID
	turn   int
}

func (l *log) add(ev any) *log { l.events = append(l.events, ev); return l }

func header(typ string) event.Header {
	h := event.NewHeader(typ, "acme", session)
	h.Time = t0
	return h
}

func (l *log) request(prompt string) *log {
	return l.add(&event.SessionRequested{Header: header(event.TypeSessionRequested), Request: uuid.New(), User: "ada", Model: "openai:m", Prompt: prompt})
}

// respond records a response with calls given as "tool_use ID:tool:input";
// dispatched names the service each call was dispatched with ("" none).
func (l *log) respond(dispatched string, calls ...string) *log {
	l.turn++
	ev := &event.ModelResponded{Header: header(event.TypeModelResponded), Turn: l.turn, Model: "openai:m", User: "ada",
		Usage: model.Usage{InputTokens: 10, OutputTokens: 10}}
	if len(calls) == 0 {
		ev.Content = []model.Block{{Type: model.TextBlock, Text: "the answer"}}
	}
	for _, c := range calls {
		id, rest, _ := strings.Cut(c, ":")
		name, input, _ := strings.Cut(rest, ":")
		ev.Content = append(ev.Content, model.Block{Type: model.ToolUseBlock, ID: id, Name: name, Input: json.RawMessage(input)})
		call := event.Call{ID: uuid.New(), ToolUseID: id, Name: name, Service: dispatched}
		ev.Calls = append(ev.Calls, call)
		if l.calls == nil {
			l.calls = map[string]event.Call{}
		}
		l.calls[id] = call
	}
	return l.add(ev)
}

var prepareCall = uuid.MustParse("01a20000-0000-7000-8000-0000000000aa")

// prepare records a first request whose workspace starts from a
// repository.
func (l *log) prepare(prompt string) *log {
	return l.add(&event.SessionRequested{Header: header(event.TypeSessionRequested), Request: uuid.New(), User: "ada", Model: "openai:m", Prompt: prompt,
		Repo: &event.Repo{URL: "https://git.example.com/app.git"}, Prepare: prepareCall})
}

func (l *log) prepareDispatched() *log {
	return l.add(&event.ToolDispatched{Header: header(event.TypeToolDispatched), Call: prepareCall, Name: event.PrepareTool, Service: "sandbox"})
}

func (l *log) prepared(output string, failed bool) *log {
	return l.add(&event.ToolCompleted{Header: header(event.TypeToolCompleted), Call: prepareCall, Name: event.PrepareTool, Output: output, IsError: failed, Service: "sandbox",
		Prepared: &event.Prepared{Files: 3}})
}

func (l *log) dispatched(id, service string) *log {
	return l.add(&event.ToolDispatched{Header: header(event.TypeToolDispatched), Call: l.calls[id].ID, Name: l.calls[id].Name, Service: service})
}

func (l *log) result(id, output string) *log {
	return l.add(&event.ToolCompleted{Header: header(event.TypeToolCompleted), Call: l.calls[id].ID, Name: l.calls[id].Name, Output: output, Service: "sandbox"})
}

// refused records the harness's own result of a call it refused.
func (l *log) refused(id, output string) *log {
	return l.add(&event.ToolCompleted{Header: header(event.TypeToolCompleted), Call: l.calls[id].ID, Name: l.calls[id].Name, Output: output, IsError: true})
}

func (l *log) asked(id string) *log {
	return l.add(&event.ApprovalRequested{Header: header(event.TypeApprovalRequested), Call: l.calls[id].ID})
}

func (l *log) decided(id string, input string, approved bool, key ed25519.PrivateKey) *log {
	c := l.calls[id]
	d := &event.ApprovalDecided{Header: header(event.TypeApprovalDecided), Call: c.ID, ArgsHash: event.ArgsHash(c.Name, json.RawMessage(input)), Approved: approved, Reviewer: "rev"}
	d.Sign(key)
	return l.add(d)
}

func (l *log) fold() *State {
	st := New("acme", session)
	for i, ev := range l.events {
		st.Apply(uint64(i+1), ev)
	}
	return st
}

// show writes actions as the test cases expect them, with calls by their
// tool_use IDs.
func show(acts []Action) string {
	var out []string
	for _, a := range acts {
		switch a := a.(type) {
		case AskModel:
			var last []string
			m := a.Messages[len(a.Messages)-1]
			for _, b := range m.Content {
				last = append(last, cmpOr(b.Text, b.Content))
			}
			out = append(out, fmt.Sprintf("ask(%d messages, last %s: %s)", len(a.Messages), m.Role, strings.Join(last, "|")))
		case Dispatch:
			s := "dispatch " + a.Call.ToolUseID + " to " + a.Service
			if a.Recorded {
				s = "queue again " + a.Call.ToolUseID + " to " + a.Service
			}
			out = append(out, s)
		case RecordDispatched:
			out = append(out, "record dispatched "+a.Call.ToolUseID)
		case Hold:
			out = append(out, fmt.Sprintf("hold %s (rule %s, asked %v)", a.Call.ToolUseID, a.Rule, a.Asked))
		case Refuse:
			out = append(out, "refuse "+a.Call.ToolUseID+": "+a.Reason)
		case Prepare:
			s := "prepare from " + a.Input.Repo.URL
			if a.Recorded {
				s = "queue again the preparation"
			}
			out = append(out, s)
		case Complete:
			out = append(out, "complete: "+a.Answer)
		case Fail:
			out = append(out, "fail "+a.Code+" "+a.Budget)
		case Pause:
			out = append(out, "pause "+a.Budget)
		case Resume:
			out = append(out, "resume by "+a.Reviewer)
		}
	}
	return strings.Join(out, "; ")
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

const (
	editUnread = `{"file_path":"/memories/x.md","old_string":"a","new_string":"b"}`
	bashTrue   = `{"command":"true"}`
	bashRm     = `{"command":"rm -rf /workspace"}`
	bashPush   = `{"command":"git push"}`
)

func TestNext(t *testing.T) {
	pol, err := policy.Parse([]byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	_, otherKey, _ := ed25519.GenerateKey(nil)
	env := Env{Policy: pol, ApprovalKey: approvalPub, MaxTurns: 3, Now: t0.Add(time.Minute), RequeueAfter: NoRequeue}
	for _, tc := range []struct {
		name string
		log  *log
		env  func(*Env)
		want string
	}{
		{"a new session asks the model", new(log).request("hi"), nil,
			"ask(1 messages, last user: hi)"},
		{"nothing to do before any request", new(log), nil, ""},
		{"a workspace from a repository is prepared before the model is asked", new(log).prepare("hi"), nil,
			"prepare from https://git.example.com/app.git"},
		{"a preparation dispatched waits for its result", new(log).prepare("hi").prepareDispatched(), nil, ""},
		{"a preparation dispatched after the trigger is queued again", new(log).prepare("hi").prepareDispatched(), func(e *Env) { e.RequeueAfter = 1 },
			"queue again the preparation"},
		{"a follow-up while preparing waits too", new(log).prepare("hi").prepareDispatched().request("also"), nil, ""},
		{"a prepared workspace: the model is asked, told what it holds first", new(log).prepare("hi").prepareDispatched().prepared("cloned", false), nil,
			"ask(1 messages, last user: cloned|hi)"},
		{"a failed preparation fails the session", new(log).prepare("hi").prepareDispatched().prepared("unknown ref", true), nil,
			"fail workspace_failed "},
		{"a preparation named by a follow-up is not the session's", new(log).request("hi").respond("").prepare("again"), nil,
			"ask(3 messages, last user: again)"},
		{"calls of a response are dispatched", new(log).request("hi").respond("", "a:Bash:"+bashTrue, "b:Read:"+`{"file_path":"/memories/x.md"}`), nil,
			"dispatch a to sandbox; dispatch b to memory"},
		{"calls dispatched with the response wait for their results", new(log).request("hi").respond("sandbox", "a:Bash:"+bashTrue), nil,
			""},
		{"calls dispatched after the trigger are queued again", new(log).request("hi").respond("sandbox", "a:Bash:"+bashTrue), func(e *Env) { e.RequeueAfter = 1 },
			"queue again a to sandbox"},
		{"calls dispatched before the trigger are not", new(log).request("hi").respond("sandbox", "a:Bash:"+bashTrue).respond("", "x:Bash:"+bashTrue), func(e *Env) { e.RequeueAfter = 2 },
			"dispatch x to sandbox"},
		{"a call with a result is not queued again", new(log).request("hi").respond("sandbox", "a:Bash:"+bashTrue, "b:Bash:"+bashTrue).result("a", "ok"), func(e *Env) { e.RequeueAfter = 1 },
			"queue again b to sandbox"},
		{"all results in: the model is asked with them", new(log).request("hi").respond("sandbox", "a:Bash:"+bashTrue, "b:Bash:"+bashTrue).result("b", "B").result("a", "A"), nil,
			"ask(3 messages, last user: A|B)"},
		{"a follow-up during the turn comes after the results", new(log).request("hi").respond("sandbox", "a:Bash:"+bashTrue).request("also").result("a", "A"), nil,
			"ask(3 messages, last user: A|also)"},
		{"results of calls never recorded as dispatched are backfilled", new(log).request("hi").respond("", "a:Bash:"+bashTrue, "r:Bash:"+bashRm).result("a", "A").result("r", "refused"), nil,
			"record dispatched a; ask(3 messages, last user: A|refused)"},
		{"a call the harness refused is not backfilled as dispatched, though the policy allows it now", new(log).request("hi").respond("", "a:Bash:"+bashTrue).refused("a", "refused then"), nil,
			"ask(3 messages, last user: refused then)"},
		{"a refused Edit of an unread file is not backfilled as dispatched", new(log).request("hi").respond("", "a:Bash:"+bashTrue, "e:Edit:"+editUnread).result("a", "A").result("e", "refused"), nil,
			"record dispatched a; ask(3 messages, last user: A|refused)"},
		{"a call the policy denies is refused", new(log).request("hi").respond("", "r:Bash:"+bashRm), nil,
			"refuse r: refused by policy (rule no-rm): it deletes"},
		{"a call that cannot run is refused", new(log).request("hi").respond("", "e:Read:"+`{"file_path":"/etc/../../x"}`, "n:Nope:{}"), nil,
			`refuse e: path is outside /workspace: /etc/../../x; refuse n: unknown tool "Nope": the tools are Bash, Read, Write, Edit, Glob and Grep`},
		{"an unread memory file's Edit is refused before any reviewer", new(log).request("hi").respond("", "e:Edit:"+editUnread), nil,
			"refuse e: /memories/x.md: this session has not read it: Read it first (an Edit changes a file that exists, as last read), then make your change"},
		{"a held call asks a reviewer", new(log).request("hi").respond("", "p:Bash:"+bashPush), nil,
			"hold p (rule push, asked false)"},
		{"a held call asked about waits", new(log).request("hi").respond("", "p:Bash:"+bashPush).asked("p"), nil,
			"hold p (rule push, asked true)"},
		{"without an approval key a held call is refused", new(log).request("hi").respond("", "p:Bash:"+bashPush), func(e *Env) { e.ApprovalKey = nil },
			"refuse p: this call needs a reviewer's approval under policy rule push (it pushes), and this deployment takes no approvals, so it was not run"},
		{"an approved call is dispatched", new(log).request("hi").respond("", "p:Bash:"+bashPush).asked("p").decided("p", bashPush, true, approvalKey), nil,
			"dispatch p to sandbox"},
		{"a denied call is refused", new(log).request("hi").respond("", "p:Bash:"+bashPush).asked("p").decided("p", bashPush, false, approvalKey), nil,
			"refuse p: a reviewer (rev) denied this call, held under policy rule push: no reason given"},
		{"a decision that does not verify counts for nothing", new(log).request("hi").respond("", "p:Bash:"+bashPush).asked("p").decided("p", bashPush, true, otherKey), nil,
			"hold p (rule push, asked true)"},
		{"a decision on other arguments counts for nothing", new(log).request("hi").respond("", "p:Bash:"+bashPush).asked("p").decided("p", `{"command":"git push --force"}`, true, approvalKey), nil,
			"hold p (rule push, asked true)"},
		{"a failed session continued closes its open turn", new(log).request("hi").respond("sandbox", "a:Bash:"+bashTrue).add(&event.SessionFailed{Header: header(event.TypeSessionFailed)}).request("again"), nil,
			"ask(4 messages, last user: again)"},
		{"a response without calls completes the session", new(log).request("hi").respond(""), nil,
			"complete: the answer"},
		{"a completed session does nothing", new(log).request("hi").respond("").add(&event.SessionCompleted{Header: header(event.TypeSessionCompleted)}), nil,
			""},
		{"a stopped session does nothing", new(log).request("hi").respond("", "a:Bash:"+bashTrue).add(&event.SessionStopped{Header: header(event.TypeSessionStopped)}), nil,
			""},
		{"the turn limit fails the session", new(log).request("hi").respond("sandbox", "a:Bash:"+bashTrue).result("a", "A").respond("sandbox", "b:Bash:"+bashTrue).result("b", "B").respond("sandbox", "c:Bash:"+bashTrue).result("c", "C"), nil,
			"fail turn_limit "},
		{"steps count against the session's budget before asking", new(log).request("hi").respond("sandbox", "a:Bash:"+bashTrue).result("a", "A"), func(e *Env) {
			e.MaxTurns = 100
			e.Policy = mustParse(t, strings.Replace(testPolicy, "steps: 5", "steps: 1", 1))
		},
			"pause session.steps"},
		{"steps do not stop the calls of the last turn", new(log).request("hi").respond("", "a:Bash:"+bashTrue), func(e *Env) {
			e.Policy = mustParse(t, strings.Replace(testPolicy, "steps: 5", "steps: 1", 1))
		},
			"dispatch a to sandbox"},
		{"cost pauses a session before its calls run", new(log).request("hi").respond("", "a:Bash:"+bashTrue), func(e *Env) {
			e.Policy = mustParse(t, strings.Replace(testPolicy, "cost_usd: 1\n", "cost_usd: 0.01\n", 1))
		},
			"pause session.cost_usd"},
		{"tokens pause a session", new(log).request("hi").respond("", "a:Bash:"+bashTrue), func(e *Env) {
			e.Policy = mustParse(t, strings.Replace(testPolicy, "steps: 5", "tokens: 20", 1))
		},
			"pause session.tokens"},
		{"sandbox time pauses a session", new(log).request("hi").respond("", "a:Bash:"+bashTrue, "b:Bash:"+bashTrue).dispatched("a", "sandbox").dispatched("b", "sandbox").resultTook("a", "A", 2500), func(e *Env) {
			e.Policy = mustParse(t, strings.Replace(testPolicy, "steps: 5", "sandbox_seconds: 2", 1))
		},
			"pause session.sandbox_seconds"},
		{"cost does not stop a response this step asked for", new(log).request("hi").respond("", "a:Bash:"+bashTrue), func(e *Env) {
			e.Asked = true
			e.Policy = mustParse(t, strings.Replace(testPolicy, "cost_usd: 1\n", "cost_usd: 0.01\n", 1))
		},
			"dispatch a to sandbox"},
		{"a user's daily budget pauses the session", new(log).request("hi"), func(e *Env) { e.UserDay = policy.Usage{CostUSD: 11} },
			"pause user_daily.cost_usd"},
		{"the tenant's daily budget fails it", new(log).request("hi"), func(e *Env) {
			e.Policy = mustParse(t, strings.Replace(testPolicy, "  user_daily:", "  tenant_daily: {steps: 3}\n  user_daily:", 1))
			e.TenantDay = policy.Usage{Steps: 3}
		},
			"fail budget_exceeded tenant_daily.steps"},
		{"the tenant's daily budget fails a session over its own budget too", new(log).request("hi").respond("", "a:Bash:"+bashTrue), func(e *Env) {
			e.Policy = mustParse(t, strings.Replace(strings.Replace(testPolicy, "cost_usd: 1\n", "cost_usd: 0.01\n", 1), "  user_daily:", "  tenant_daily: {cost_usd: 5}\n  user_daily:", 1))
			e.TenantDay = policy.Usage{CostUSD: 6}
		},
			"fail budget_exceeded tenant_daily.cost_usd"},
		{"the wall time pauses it", new(log).request("hi"), func(e *Env) { e.Now = t0.Add(2 * time.Hour) },
			"pause session.wall_time"},
		{"the turn limit still fails, whatever raise", new(log).request("hi").respond("sandbox", "a:Bash:"+bashTrue).result("a", "A").respond("sandbox", "b:Bash:"+bashTrue).result("b", "B").respond("sandbox", "c:Bash:"+bashTrue).result("c", "C").
			raise(raise1, `{"steps":100}`).raiseDecided(raise1, `{"steps":100}`, true, approvalKey), nil,
			"fail turn_limit "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := env
			if tc.env != nil {
				tc.env(&e)
			}
			st := tc.log.fold()
			if got := show(Next(st, e)); got != tc.want {
				t.Errorf("Next =\n  %s\nwant\n  %s", got, tc.want)
			}
		})
	}
}

func mustParse(t *testing.T, yaml string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The conversation a step asks with holds the pending calls' results,
// which the state itself folds in only with the next response: asking
// for it leaves the state as it is, and what it returned stays as it was
// when the state goes on.
func TestConversationLeavesTheStateAsItIs(t *testing.T) {
	l := new(log).request("go").respond("sandbox", "a:Bash:"+`{"command":"true"}`).result("a", "one")
	st := l.fold()
	n := len(st.Messages)
	asked := st.Conversation()
	if len(asked) != n+1 || asked[n].Content[0].ToolUseID != "a" || asked[n].Content[0].Content != "one" {
		t.Fatalf("the conversation asked with = %+v, want the state's %d messages and the result", asked, n)
	}
	if len(st.Messages) != n || st.Pending == nil {
		t.Fatalf("asking for the conversation changed the state: %d messages, pending %v", len(st.Messages), st.Pending != nil)
	}
	before, _ := json.Marshal(asked)
	l.respond("sandbox", "b:Bash:"+`{"command":"false"}`).result("b", "two")
	for i, ev := range l.events[len(l.events)-2:] {
		st.Apply(uint64(len(l.events)-1+i), ev)
	}
	if after, _ := json.Marshal(asked); string(after) != string(before) {
		t.Errorf("the conversation asked with changed as the state went on:\n%s\nwas\n%s", after, before)
	}
	if again, _ := json.Marshal(st.Conversation()[:n+1]); string(again) != string(before) {
		t.Errorf("the state's conversation = %s, want it to start with what was asked: %s", again, before)
	}
}
