package core

import (
	"crypto/ed25519"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/event"
	"corral.dev/pkg/policy"
)

var (
	raise1 = uuid.MustParse("01a20000-0000-7000-8000-0000000000b1")
	raise2 = uuid.MustParse("01a20000-0000-7000-8000-0000000000b2")
)

// at returns ev with its time set to t0+d.
func at[T event.Event](ev T, d time.Duration) T {
	ev.Head().Time = t0.Add(d)
	return ev
}

// resultTook records a call's result from a sandbox that ran it for ms.
func (l *log) resultTook(id, output string, ms int64) *log {
	return l.add(&event.ToolCompleted{Header: header(event.TypeToolCompleted), Call: l.calls[id].ID, Name: l.calls[id].Name, Output: output, Service: "sandbox", DurationMS: ms})
}

// paused records a pause over budget, after the session worked for
// after.
func (l *log) paused(budget string, after time.Duration) *log {
	return l.add(at(&event.SessionPaused{Header: header(event.TypeSessionPaused), Budget: budget, Reason: "over"}, after))
}

func (l *log) resumed(id uuid.UUID, after time.Duration) *log {
	return l.add(at(&event.SessionResumed{Header: header(event.TypeSessionResumed), Raise: id, Reviewer: "rev"}, after))
}

// raise records a request to raise the session's caps to limits.
func (l *log) raise(id uuid.UUID, limits string) *log {
	return l.add(&event.BudgetRaise{Header: header(event.TypeBudgetRaise), Raise: id, User: "ada", Limits: json.RawMessage(limits)})
}

// raiseDecided records a reviewer's decision on raise id, to limits,
// signed with key.
func (l *log) raiseDecided(id uuid.UUID, limits string, approved bool, key ed25519.PrivateKey) *log {
	d := &event.ApprovalDecided{Header: header(event.TypeApprovalDecided), Call: id, ArgsHash: event.ArgsHash(event.BudgetTool, json.RawMessage(limits)), Approved: approved, Reviewer: "rev"}
	d.Sign(key)
	return l.add(d)
}

// A session over any budget but its tenant's daily one pauses, and goes on
// where it was once a reviewer approves a raise since; a raise denied, or
// one that does not verify, or not enough, leaves it paused.
func TestPause(t *testing.T) {
	pol, err := policy.Parse([]byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	_, otherKey, _ := ed25519.GenerateKey(nil)
	env := Env{Policy: pol, ApprovalKey: approvalPub, MaxTurns: 10, Now: t0.Add(time.Minute), RequeueAfter: NoRequeue}
	cheap := mustParse(t, strings.Replace(testPolicy, "cost_usd: 1\n", "cost_usd: 0.01\n", 1)) // one response costs $0.02
	oneStep := mustParse(t, strings.Replace(testPolicy, "steps: 5", "steps: 1", 1))
	tenantDaily := mustParse(t, strings.Replace(strings.Replace(testPolicy, "cost_usd: 1\n", "cost_usd: 0.01\n", 1), "  user_daily:", "  tenant_daily: {cost_usd: 5}\n  user_daily:", 1))
	const more = `{"cost_usd":5}`
	// pending is a session paused over its cost before its calls ran.
	pending := func() *log {
		return new(log).request("hi").respond("", "a:Bash:"+bashTrue).paused("session.cost_usd", time.Second)
	}
	for _, tc := range []struct {
		name string
		log  *log
		env  func(*Env)
		want string
	}{
		{"a paused session waits", pending(), nil, ""},
		{"a raise asked for changes nothing yet", pending().raise(raise1, more), nil, ""},
		{"a raise approved since the pause resumes it", pending().raise(raise1, more).raiseDecided(raise1, more, true, approvalKey), nil,
			"resume by rev"},
		{"resumed, its pending calls are dispatched", pending().raise(raise1, more).raiseDecided(raise1, more, true, approvalKey).resumed(raise1, 2*time.Second), nil,
			"dispatch a to sandbox"},
		{"resumed, the model is asked with the results that came while paused",
			new(log).request("hi").respond("", "a:Bash:"+bashTrue).dispatched("a", "sandbox").paused("session.wall_time", time.Hour).result("a", "A").
				raise(raise1, `{"wall_time":"2h"}`).raiseDecided(raise1, `{"wall_time":"2h"}`, true, approvalKey).resumed(raise1, 3*time.Hour),
			func(e *Env) { e.Policy, e.Now = pol, t0.Add(3*time.Hour) },
			"ask(3 messages, last user: A)"},
		{"a raise denied leaves it paused", pending().raise(raise1, more).raiseDecided(raise1, more, false, approvalKey), nil, ""},
		{"a raise that does not verify leaves it paused", pending().raise(raise1, more).raiseDecided(raise1, more, true, otherKey), nil, ""},
		{"a decision on other limits leaves it paused", pending().raise(raise1, more).raiseDecided(raise1, `{"cost_usd":500}`, true, approvalKey), nil, ""},
		{"a raise approved before the pause does not resume it",
			new(log).request("hi").respond("", "a:Bash:"+bashTrue).raise(raise1, more).raiseDecided(raise1, more, true, approvalKey).paused("session.steps", time.Second), nil, ""},
		{"a raise not enough pauses it again", pending().raise(raise1, `{"cost_usd":0.015}`).raiseDecided(raise1, `{"cost_usd":0.015}`, true, approvalKey), nil,
			"pause session.cost_usd"},
		{"paused again, it waits for the next raise",
			pending().raise(raise1, `{"cost_usd":0.015}`).raiseDecided(raise1, `{"cost_usd":0.015}`, true, approvalKey).paused("session.cost_usd", 2*time.Second), nil, ""},
		{"the next raise resumes it",
			pending().raise(raise1, `{"cost_usd":0.015}`).raiseDecided(raise1, `{"cost_usd":0.015}`, true, approvalKey).paused("session.cost_usd", 2*time.Second).
				raise(raise2, more).raiseDecided(raise2, more, true, approvalKey), nil,
			"resume by rev"},
		{"a raise of the session's caps does not lift its user's daily budget",
			new(log).request("hi").paused("user_daily.cost_usd", 0).raise(raise1, more).raiseDecided(raise1, more, true, approvalKey),
			func(e *Env) { e.UserDay = policy.Usage{CostUSD: 11} },
			"pause user_daily.cost_usd"},
		{"the user's next day, a raise resumes it",
			new(log).request("hi").paused("user_daily.cost_usd", 0).raise(raise1, more).raiseDecided(raise1, more, true, approvalKey), nil,
			"resume by rev"},
		{"a raise approved over the tenant's daily budget fails the session", pending().raise(raise1, more).raiseDecided(raise1, more, true, approvalKey),
			func(e *Env) { e.Policy, e.TenantDay = tenantDaily, policy.Usage{CostUSD: 6} },
			"fail budget_exceeded tenant_daily.cost_usd"},
		{"steps are not counted against calls still to run", pending().raise(raise1, more).raiseDecided(raise1, more, true, approvalKey),
			func(e *Env) { e.Policy = oneStep },
			"resume by rev"},
		{"steps are counted before the model is asked",
			new(log).request("hi").respond("sandbox", "a:Bash:"+bashTrue).result("a", "A").paused("session.cost_usd", time.Second).raise(raise1, more).raiseDecided(raise1, more, true, approvalKey),
			func(e *Env) { e.Policy = oneStep },
			"pause session.steps"},
		{"a follow-up goes on from where it was, its prompt after the calls' results", pending().request("go on"), func(e *Env) { e.Policy = pol },
			"dispatch a to sandbox"},
		{"a follow-up still over the budget pauses it again", pending().request("go on"), func(e *Env) { e.Policy = cheap },
			"pause session.cost_usd"},
		{"a stopped session stays stopped", pending().add(&event.SessionStopped{Header: header(event.TypeSessionStopped)}).raise(raise1, more).raiseDecided(raise1, more, true, approvalKey), nil,
			""},
		{"a pause recorded after a stop ends nothing more",
			new(log).request("hi").add(&event.SessionStopped{Header: header(event.TypeSessionStopped)}).paused("session.cost_usd", time.Second).raise(raise1, more).raiseDecided(raise1, more, true, approvalKey), nil,
			""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := env
			e.Policy = cheap
			if tc.env != nil {
				tc.env(&e)
			}
			if got := show(Next(tc.log.fold(), e)); got != tc.want {
				t.Errorf("Next =\n  %s\nwant\n  %s", got, tc.want)
			}
		})
	}
}

// The wall-time budget measures the time a session works on its request:
// time paused does not count, and a follow-up starts it again.
func TestWallTimeLeavesOutPauses(t *testing.T) {
	pol := mustParse(t, testPolicy) // wall_time: 1h
	env := Env{Policy: pol, ApprovalKey: approvalPub, MaxTurns: 10, RequeueAfter: NoRequeue}
	const hour = `{"steps":6}`
	// Paused over its steps after 50 minutes; resumed three hours later.
	resumed := func() *log {
		return new(log).request("hi").respond("sandbox", "a:Bash:"+bashTrue).result("a", "A").paused("session.steps", 50*time.Minute).
			raise(raise1, hour).raiseDecided(raise1, hour, true, approvalKey).resumed(raise1, 230*time.Minute)
	}
	for _, tc := range []struct {
		name string
		log  *log
		now  time.Duration
		want time.Duration // Elapsed
		over bool
	}{
		{"paused: its wall time stops at the pause", new(log).request("hi").paused("session.steps", 50*time.Minute), 5 * time.Hour, 50 * time.Minute, false},
		{"resumed: its wall time goes on from there", resumed(), 235 * time.Minute, 55 * time.Minute, false},
		{"resumed, then over its wall time", resumed(), 241 * time.Minute, 61 * time.Minute, true},
		{"a follow-up starts its wall time again", new(log).request("hi").paused("session.steps", 50*time.Minute).add(at(&event.SessionRequested{Header: header(event.TypeSessionRequested), Request: uuid.New(), User: "ada", Model: "openai:m", Prompt: "go on"}, 4*time.Hour)),
			250 * time.Minute, 10 * time.Minute, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := env
			e.Now = t0.Add(tc.now)
			st := tc.log.fold()
			if got := Elapsed(st, e.Now); got != tc.want {
				t.Errorf("Elapsed = %s, want %s", got, tc.want)
			}
			if p := OverWallTime(st, e); (p != nil) != tc.over || p != nil && p.Budget != "session.wall_time" {
				t.Errorf("OverWallTime = %+v, want over %v", p, tc.over)
			}
		})
	}
}
