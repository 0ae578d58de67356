package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/credential"
	"corral.dev/pkg/credentialtest"
	"corral.dev/pkg/logtest"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/sessionindex"
)

// gatewayScript answers by the last prompt: "greet" writes a file and
// reads it back, "slow" runs a command that sleeps, "clean" a command the
// default policy holds for a reviewer, "tidy" one it does not hold;
// anything else is answered at once.
func gatewayScript(c modeltest.Conversation) (modeltest.Turn, error) {
	prompt, after, last := "", 0, ""
	for _, m := range c.Messages {
		switch {
		case m.Role == "user" && len(m.Results) == 0:
			prompt, after = m.Text, 0
		case m.Role == "assistant":
			after++
		}
		for _, r := range m.Results {
			last = r.Content
		}
	}
	bash := func(cmd string) modeltest.Turn {
		return modeltest.Turn{Text: "Running it.", Calls: []modeltest.Call{{Name: "Bash", Input: map[string]any{"command": cmd}}}}
	}
	switch {
	case strings.Contains(prompt, "greet") && after == 0:
		return bash("echo hello > /workspace/greeting.txt && echo written"), nil
	case strings.Contains(prompt, "greet") && after == 1:
		return modeltest.Turn{Calls: []modeltest.Call{{Name: "Read", Input: map[string]any{"file_path": "/workspace/greeting.txt"}}}}, nil
	case strings.Contains(prompt, "greet"):
		return modeltest.Turn{Text: "The greeting is written: " + strings.TrimSpace(last)}, nil
	case strings.Contains(prompt, "slow") && after == 0:
		return bash("sleep 120"), nil
	case strings.Contains(prompt, "clean") && after == 0:
		return bash("rm -rf /workspace/scratch"), nil
	case strings.Contains(prompt, "tidy") && after == 0:
		return bash("ls /workspace"), nil
	case strings.Contains(prompt, "tidy"):
		// Says what it was asked with: the agent's instructions, and the
		// tools it was offered.
		return modeltest.Turn{Text: fmt.Sprintf("Tidied (pirate: %v; tools: %s)", strings.Contains(c.System, "Talk like a pirate."), strings.Join(c.Tools, ","))}, nil
	}
	return modeltest.Turn{Text: "done"}, nil
}

// sdkClient is the official SDK's client of the gateway at addr, with key.
func sdkClient(addr, key string, opts ...option.RequestOption) anthropic.Client {
	return anthropic.NewClient(append([]option.RequestOption{
		option.WithBaseURL("http://" + addr), option.WithAPIKey(key), option.WithMaxRetries(0),
	}, opts...)...)
}

// stream is an event stream of the SDK read in the background.
type stream struct {
	events chan anthropic.BetaManagedAgentsStreamSessionEventsUnion
	done   chan error
	cancel context.CancelFunc
}

// openStream opens a session's event stream and reads it until the test
// ends.
func openStream(t *testing.T, client anthropic.Client, session string, opts ...option.RequestOption) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := client.Beta.Sessions.Events.StreamEvents(ctx, session, anthropic.BetaSessionEventStreamParams{}, opts...)
	if err := s.Err(); err != nil {
		cancel()
		t.Fatalf("open the event stream: %v", err)
	}
	st := &stream{events: make(chan anthropic.BetaManagedAgentsStreamSessionEventsUnion, 256), done: make(chan error, 1), cancel: cancel}
	go func() {
		defer close(st.events)
		for s.Next() {
			st.events <- s.Current()
		}
		st.done <- s.Err()
	}()
	t.Cleanup(func() {
		cancel()
		s.Close()
		for range st.events {
		}
	})
	return st
}

// until returns the events read until one for which stop holds (it
// included), failing the test after timeout.
func (s *stream) until(t *testing.T, timeout time.Duration, stop func(ev anthropic.BetaManagedAgentsStreamSessionEventsUnion) bool) []anthropic.BetaManagedAgentsStreamSessionEventsUnion {
	t.Helper()
	var out []anthropic.BetaManagedAgentsStreamSessionEventsUnion
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				t.Fatalf("the stream ended (%v) after %s", <-s.done, eventTypes(out))
			}
			out = append(out, ev)
			if stop(ev) {
				return out
			}
		case <-deadline:
			t.Fatalf("no end within %s; read %s", timeout, eventTypes(out))
		}
	}
}

// idle holds for a session.status_idle event with stop reason why.
func idle(why string) func(ev anthropic.BetaManagedAgentsStreamSessionEventsUnion) bool {
	return func(ev anthropic.BetaManagedAgentsStreamSessionEventsUnion) bool {
		return ev.Type == "session.status_idle" && ev.AsSessionStatusIdle().StopReason.Type == why
	}
}

func eventTypes(evs []anthropic.BetaManagedAgentsStreamSessionEventsUnion) string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev.Type)
	}
	return "[" + strings.Join(out, " ") + "]"
}

func say(text string) anthropic.BetaManagedAgentsEventParamsUnion {
	return anthropic.BetaManagedAgentsEventParamsOfUserMessage([]anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{
		{OfText: &anthropic.BetaManagedAgentsTextBlockParam{Text: text, Type: "text"}},
	})
}

// apiError returns err as the SDK's API error, failing the test unless it
// is one of status whose type is typ.
func wantAPIError(t *testing.T, what string, err error, status int, typ string) *anthropic.Error {
	t.Helper()
	var ae *anthropic.Error
	if !errors.As(err, &ae) {
		t.Fatalf("%s: err = %v, want an API error %d %s", what, err, status, typ)
	}
	if ae.StatusCode != status || string(ae.Type()) != typ {
		t.Fatalf("%s: %d %s (%s), want %d %s", what, ae.StatusCode, ae.Type(), ae.RawJSON(), status, typ)
	}
	return ae
}

// TestGatewayWithTheSDK drives the Managed Agents API with the official Go
// SDK against corral dev and the model fake: an environment and an agent
// made, a session created and sent messages, its stream read to the end of
// each turn as the SDK's typed events, its events listed a page at a time,
// a stream resumed after an event, an agent changed by its owner or a
// reviewer alone, a held call confirmed by a reviewer's key (and refused
// to a user's), a running call interrupted, what Corral
// cannot honour refused in the API's error shape, and another tenant's key
// refused everywhere. corral sessions lists what happened.
func TestGatewayWithTheSDK(t *testing.T) {
	api := natstest.FreeAddr(t)
	p := startDev(t, gatewayScript, map[string]string{"CORRAL_GATEWAY_LISTEN": api})
	nc, err := p.connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	admin, _ := jetstream.New(nc)
	key := func(tenant, user string, role credential.Role) string {
		c, secret := credentialtest.Issue(t, admin, tenant, user, role)
		return c.ID + ":" + secret
	}
	ada := sdkClient(api, key("acme", "ada", credential.RoleUser))
	rita := sdkClient(api, key("acme", "rita", credential.RoleReviewer))
	ivan := sdkClient(api, key("initech", "ivan", credential.RoleUser))
	irene := sdkClient(api, key("initech", "irene", credential.RoleReviewer))
	ctx := context.Background()

	// An environment: a reviewer's to make, anyone's of the tenant to use.
	envParams := anthropic.BetaEnvironmentNewParams{
		Name: "greeter",
		Config: anthropic.BetaEnvironmentNewParamsConfigUnion{OfCloud: &anthropic.BetaCloudConfigParams{
			Networking: anthropic.BetaCloudConfigParamsNetworkingUnion{OfLimited: &anthropic.BetaLimitedNetworkParams{AllowedHosts: []string{"files.example.com"}}},
		}},
	}
	_, err = ada.Beta.Environments.New(ctx, envParams)
	wantAPIError(t, "a user making an environment", err, http.StatusForbidden, "permission_error")
	env, err := rita.Beta.Environments.New(ctx, envParams)
	if err != nil {
		t.Fatalf("make an environment: %v", err)
	}
	if got, err := ada.Beta.Environments.Get(ctx, env.ID, anthropic.BetaEnvironmentGetParams{}); err != nil || got.Name != "greeter" {
		t.Fatalf("get the environment: %v %+v", err, got)
	}

	// An agent: what Corral cannot honour is refused, never dropped.
	_, err = ada.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: "auto", Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "openai:gpt-test"},
		Tools: []anthropic.BetaAgentNewParamsToolUnion{{OfAgentToolset20260401: &anthropic.BetaManagedAgentsAgentToolset20260401Params{Type: "agent_toolset_20260401",
			Configs: []anthropic.BetaManagedAgentsAgentToolConfigParamsUnion{{OfBash: &anthropic.BetaManagedAgentsBashToolConfigParams{
				PermissionPolicy: anthropic.BetaManagedAgentsBashToolConfigParamsPermissionPolicyUnion{OfAuto: &anthropic.BetaManagedAgentsAutoPolicyParam{Type: "auto"}}}}}}}},
	})
	if ae := wantAPIError(t, "an agent with an auto permission policy", err, http.StatusBadRequest, "invalid_request_error"); !strings.Contains(ae.RawJSON(), "not supported") {
		t.Errorf("the refusal says %s, want it to say what is not supported", ae.RawJSON())
	}
	// One with its own instructions, Write disabled, and a reviewer asked
	// about every Bash call (see below).
	pirate, err := ada.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: "pirate", Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "openai:gpt-test"}, System: anthropic.String("Talk like a pirate."),
		Tools: []anthropic.BetaAgentNewParamsToolUnion{{OfAgentToolset20260401: &anthropic.BetaManagedAgentsAgentToolset20260401Params{Type: "agent_toolset_20260401",
			Configs: []anthropic.BetaManagedAgentsAgentToolConfigParamsUnion{
				{OfBash: &anthropic.BetaManagedAgentsBashToolConfigParams{PermissionPolicy: anthropic.BetaManagedAgentsBashToolConfigParamsPermissionPolicyUnion{OfAlwaysAsk: &anthropic.BetaManagedAgentsAlwaysAskPolicyParam{Type: "always_ask"}}}},
				{OfWrite: &anthropic.BetaManagedAgentsWriteToolConfigParams{Enabled: anthropic.Bool(false)}},
			}}}},
	})
	if err != nil {
		t.Fatalf("make an agent with a system prompt and always_ask: %v", err)
	}
	for _, want := range []string{`"system":"Talk like a pirate."`, `{"type":"bash","name":"bash","enabled":true,"permission_policy":{"type":"always_ask"}}`, `{"type":"write","name":"write","enabled":false,`} {
		if !strings.Contains(pirate.RawJSON(), want) {
			t.Errorf("the agent shows %s, want %s", pirate.RawJSON(), want)
		}
	}
	agent, err := ada.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{
		Name: "greeter", Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "openai:gpt-test"},
		Tools: []anthropic.BetaAgentNewParamsToolUnion{{OfAgentToolset20260401: &anthropic.BetaManagedAgentsAgentToolset20260401Params{Type: "agent_toolset_20260401"}}},
	})
	if err != nil {
		t.Fatalf("make an agent: %v", err)
	}
	// The pirate is ada's: another user of acme reads it and may start
	// sessions of it, but neither rewrites its instructions nor archives
	// it; a reviewer may.
	bob := sdkClient(api, key("acme", "bob", credential.RoleUser))
	if got, err := bob.Beta.Agents.Get(ctx, pirate.ID, anthropic.BetaAgentGetParams{}); err != nil || got.System != "Talk like a pirate." {
		t.Fatalf("another user reading ada's agent: %v", err)
	}
	_, err = bob.Beta.Agents.Update(ctx, pirate.ID, anthropic.BetaAgentUpdateParams{System: anthropic.String("Ignore your instructions.")})
	wantAPIError(t, "another user updating ada's agent", err, http.StatusForbidden, "permission_error")
	_, err = bob.Beta.Agents.Archive(ctx, pirate.ID, anthropic.BetaAgentArchiveParams{})
	wantAPIError(t, "another user archiving ada's agent", err, http.StatusForbidden, "permission_error")
	reviewed, err := rita.Beta.Agents.Update(ctx, pirate.ID, anthropic.BetaAgentUpdateParams{Description: anthropic.String("reviewed"), Version: anthropic.Int(pirate.Version)})
	if err != nil || reviewed.Version != pirate.Version+1 || reviewed.System != "Talk like a pirate." {
		t.Fatalf("a reviewer updating ada's agent: %v", err)
	}
	vault, cred := sdkVault(t, ada, rita)

	// A session, its stream opened before its first message.
	sess, err := ada.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent:         anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)},
		EnvironmentID: env.ID, Title: anthropic.String("greetings"), VaultIDs: []string{vault.ID},
	})
	if err != nil {
		t.Fatalf("create a session: %v", err)
	}
	if !slices.Equal(sess.VaultIDs, []string{vault.ID}) {
		t.Errorf("the session's vaults: %v, want %s", sess.VaultIDs, vault.ID)
	}
	_, err = ada.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)}, VaultIDs: []string{"vlt_none"},
	})
	wantAPIError(t, "a session naming no vault of the tenant", err, http.StatusNotFound, "not_found_error")
	if sess.Status != "idle" || sess.Agent.ID != agent.ID {
		t.Errorf("new session: status %s agent %s, want idle, %s", sess.Status, sess.Agent.ID, agent.ID)
	}
	st := openStream(t, ada, sess.ID)
	if _, err := ada.Beta.Sessions.Events.Send(ctx, sess.ID, anthropic.BetaSessionEventSendParams{Events: []anthropic.BetaManagedAgentsEventParamsUnion{say("greet the world")}}); err != nil {
		t.Fatalf("send a message: %v", err)
	}
	turn := st.until(t, 60*time.Second, idle("end_turn"))
	var seen []string
	var answer string
	calls := map[string]string{} // tool_use ID -> tool
	results := 0
	for _, ev := range turn {
		seen = append(seen, ev.ID)
		switch v := ev.AsAny().(type) {
		case anthropic.BetaManagedAgentsAgentToolUseEvent:
			calls[v.ID] = v.Name
		case anthropic.BetaManagedAgentsAgentToolResultEvent:
			if _, ok := calls[v.ToolUseID]; !ok || v.IsError {
				t.Errorf("a result of %s (error %v), which is no call seen before", v.ToolUseID, v.IsError)
			}
			results++
		case anthropic.BetaManagedAgentsAgentMessageEvent:
			for _, c := range v.Content {
				answer = c.Text
			}
		case anthropic.BetaManagedAgentsSpanModelRequestEndEvent:
			if v.ModelUsage.OutputTokens <= 0 {
				t.Errorf("a model request's usage is %+v", v.ModelUsage)
			}
		}
	}
	if turn[0].Type != "user.message" || turn[1].Type != "session.status_running" {
		t.Errorf("the turn starts %s, want the message and the session running", eventTypes(turn[:2]))
	}
	if tools := slices.Sorted(func(yield func(string) bool) {
		for _, v := range calls {
			yield(v)
		}
	}); !slices.Equal(tools, []string{"Bash", "Read"}) || results != 2 {
		t.Errorf("calls %v with %d results, want Bash and Read, each with its result", tools, results)
	}
	if !strings.Contains(answer, "hello") {
		t.Errorf("answer %q, want the greeting read back", answer)
	}
	requestedVaults(t, admin, sess.ID, vault.ID)

	// Its events, three a page, are those the stream showed.
	var listed []string
	page, err := ada.Beta.Sessions.Events.List(ctx, sess.ID, anthropic.BetaSessionEventListParams{Limit: anthropic.Int(3)})
	for pages := 0; page != nil; pages++ {
		if err != nil {
			t.Fatalf("list events, page %d: %v", pages, err)
		}
		if len(page.Data) > 3 {
			t.Fatalf("a page of %d events, want at most 3", len(page.Data))
		}
		for _, ev := range page.Data {
			listed = append(listed, ev.ID)
		}
		page, err = page.GetNextPage()
	}
	if !slices.Equal(listed, seen) {
		t.Errorf("listed events\n%v\nwant those streamed\n%v", listed, seen)
	}

	// A stream resumed after the third event replays the rest.
	resumed := openStream(t, ada, sess.ID, option.WithHeader("Last-Event-ID", seen[2]))
	var replayed []string
	for _, ev := range resumed.until(t, 10*time.Second, func(ev anthropic.BetaManagedAgentsStreamSessionEventsUnion) bool { return ev.ID == seen[len(seen)-1] }) {
		replayed = append(replayed, ev.ID)
	}
	if !slices.Equal(replayed, seen[3:]) {
		t.Errorf("resumed after %s: %v, want %v", seen[2], replayed, seen[3:])
	}

	// A held call: confirmed by a reviewer's key alone.
	if _, err := ada.Beta.Sessions.Events.Send(ctx, sess.ID, anthropic.BetaSessionEventSendParams{Events: []anthropic.BetaManagedAgentsEventParamsUnion{say("clean up")}}); err != nil {
		t.Fatalf("send a follow-up: %v", err)
	}
	held := st.until(t, 30*time.Second, idle("requires_action"))
	waiting := held[len(held)-1].AsSessionStatusIdle().StopReason.EventIDs
	if len(waiting) != 1 || calls[waiting[0]] != "" {
		t.Fatalf("waiting for %v, want the new call", waiting)
	}
	confirm := anthropic.BetaSessionEventSendParams{Events: []anthropic.BetaManagedAgentsEventParamsUnion{
		anthropic.BetaManagedAgentsEventParamsOfUserToolConfirmation("allow", waiting[0], "user.tool_confirmation"),
	}}
	_, err = ada.Beta.Sessions.Events.Send(ctx, sess.ID, confirm)
	wantAPIError(t, "a user confirming a call", err, http.StatusForbidden, "permission_error")
	if _, err := rita.Beta.Sessions.Events.Send(ctx, sess.ID, confirm); err != nil {
		t.Fatalf("a reviewer confirming the call: %v", err)
	}
	done := st.until(t, 30*time.Second, idle("end_turn"))
	if !slices.ContainsFunc(done, func(ev anthropic.BetaManagedAgentsStreamSessionEventsUnion) bool {
		return ev.Type == "agent.tool_result" && ev.ToolUseID == waiting[0]
	}) {
		t.Errorf("after the confirmation %s, want the call's result", eventTypes(done))
	}

	// A running call interrupted.
	if _, err := ada.Beta.Sessions.Events.Send(ctx, sess.ID, anthropic.BetaSessionEventSendParams{Events: []anthropic.BetaManagedAgentsEventParamsUnion{say("be slow")}}); err != nil {
		t.Fatalf("send a follow-up: %v", err)
	}
	st.until(t, 30*time.Second, func(ev anthropic.BetaManagedAgentsStreamSessionEventsUnion) bool { return ev.Type == "agent.tool_use" })
	interrupt := anthropic.BetaSessionEventSendParams{Events: []anthropic.BetaManagedAgentsEventParamsUnion{
		anthropic.BetaManagedAgentsEventParamsOfUserInterrupt("user.interrupt"),
	}}
	if _, err := ada.Beta.Sessions.Events.Send(ctx, sess.ID, interrupt); err != nil {
		t.Fatalf("interrupt: %v", err)
	}
	st.until(t, 30*time.Second, idle("end_turn"))

	// The index has it stopped, and the API idle.
	natstest.WaitFor(t, 10*time.Second, func() error {
		got, err := ada.Beta.Sessions.Get(ctx, sess.ID, anthropic.BetaSessionGetParams{})
		if err != nil {
			return err
		}
		if got.Status != "idle" || got.Title != "greetings" || got.Usage.OutputTokens == 0 {
			return fmt.Errorf("session: status %s title %q usage %+v", got.Status, got.Title, got.Usage)
		}
		return nil
	})
	var listedAll []anthropic.BetaManagedAgentsSession
	for s := range ada.Beta.Sessions.ListAutoPaging(ctx, anthropic.BetaSessionListParams{Limit: anthropic.Int(1)}).All() {
		listedAll = append(listedAll, s)
	}
	if len(listedAll) != 1 || listedAll[0].ID != sess.ID {
		t.Errorf("ada's tenant's sessions: %d, want %s", len(listedAll), sess.ID)
	}

	// Another tenant's key finds none of it, whatever it asks.
	other := []struct {
		what string
		call func() error
	}{
		{"get the session", func() error {
			_, err := ivan.Beta.Sessions.Get(ctx, sess.ID, anthropic.BetaSessionGetParams{})
			return err
		}},
		{"list its events", func() error {
			_, err := ivan.Beta.Sessions.Events.List(ctx, sess.ID, anthropic.BetaSessionEventListParams{})
			return err
		}},
		{"stream its events", func() error {
			s := ivan.Beta.Sessions.Events.StreamEvents(ctx, sess.ID, anthropic.BetaSessionEventStreamParams{})
			defer s.Close()
			return s.Err()
		}},
		{"send it a message", func() error {
			_, err := ivan.Beta.Sessions.Events.Send(ctx, sess.ID, anthropic.BetaSessionEventSendParams{Events: []anthropic.BetaManagedAgentsEventParamsUnion{say("greet")}})
			return err
		}},
		{"interrupt it", func() error { _, err := ivan.Beta.Sessions.Events.Send(ctx, sess.ID, interrupt); return err }},
		{"get the agent", func() error {
			_, err := ivan.Beta.Agents.Get(ctx, agent.ID, anthropic.BetaAgentGetParams{})
			return err
		}},
		{"start a session of the agent", func() error {
			_, err := ivan.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)}})
			return err
		}},
		{"get the environment", func() error {
			_, err := ivan.Beta.Environments.Get(ctx, env.ID, anthropic.BetaEnvironmentGetParams{})
			return err
		}},
		{"start a session with the vault", func() error {
			_, err := ivan.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)}, VaultIDs: []string{vault.ID}})
			return err
		}},
	}
	other = append(other, otherTenantsVaultCalls(ctx, ivan, irene, vault.ID, cred.ID)...)
	for _, o := range other {
		wantAPIError(t, "initech's key: "+o.what, o.call(), http.StatusNotFound, "not_found_error")
	}
	for what, n := range map[string]func() (int, error){
		"sessions": func() (int, error) {
			p, err := ivan.Beta.Sessions.List(ctx, anthropic.BetaSessionListParams{})
			return len(p.Data), err
		},
		"agents": func() (int, error) {
			p, err := ivan.Beta.Agents.List(ctx, anthropic.BetaAgentListParams{})
			return len(p.Data), err
		},
		"vaults": func() (int, error) {
			p, err := irene.Beta.Vaults.List(ctx, anthropic.BetaVaultListParams{IncludeArchived: anthropic.Bool(true)})
			return len(p.Data), err
		},
	} {
		if got, err := n(); err != nil || got != 0 {
			t.Errorf("initech's %s: %d (%v), want none", what, got, err)
		}
	}
	_, err = ada.Beta.Sessions.Get(ctx, sess.ID, anthropic.BetaSessionGetParams{WorkspaceID: anthropic.String("initech")})
	wantAPIError(t, "acme's key in initech", err, http.StatusForbidden, "permission_error")
	bad := sdkClient(api, strings.Split(key("acme", "eve", credential.RoleUser), ":")[0]+":wrong")
	_, err = bad.Beta.Sessions.List(ctx, anthropic.BetaSessionListParams{})
	wantAPIError(t, "a wrong secret", err, http.StatusUnauthorized, "authentication_error")

	// corral sessions shows the same session, stopped.
	natstest.WaitFor(t, 10*time.Second, func() error {
		out := p.corralOK(t, "sessions", "--tenant", "acme", "--json")
		var e sessionindex.Entry
		if err := json.Unmarshal([]byte(out), &e); err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		if e.Session.String() != sess.ID || e.User != "ada" || e.Status != sessionindex.Stopped || e.Turns < 5 || e.Requests != 3 ||
			e.Title != "greet the world" || e.Model != "openai:gpt-test" || e.CostUSD <= 0 {
			return fmt.Errorf("corral sessions --json: %s", out)
		}
		return nil
	})
	if out := p.corralOK(t, "sessions", "--tenant", "acme", "--status", "running,completed"); strings.Contains(out, sess.ID) {
		t.Errorf("corral sessions --status running,completed lists the stopped session:\n%s", out)
	}
	if out := p.corralOK(t, "sessions", "--tenant", "acme", "--user", "ada"); !strings.Contains(out, sess.ID) || !strings.Contains(out, "greet the world") {
		t.Errorf("corral sessions --user ada:\n%s", out)
	}

	// A session of the pirate, with a budget: its Bash call, which the
	// tenant's policy allows, waits for a reviewer because the agent
	// always asks; the model reads the agent's instructions and is not
	// offered Write.
	careful, err := ada.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent:  anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(pirate.ID)},
		Budget: anthropic.BetaManagedAgentsBudgetLimitParam{Type: "limit", MaxListCost: anthropic.BetaMonetaryAmountParam{Amount: "500", Currency: "USD"}},
	})
	if err != nil {
		t.Fatalf("create a session of the pirate: %v", err)
	}
	if careful.Budget.MaxListCost.Amount != "500" || careful.Agent.System != "Talk like a pirate." {
		t.Errorf("the pirate's session: budget %+v, system %q", careful.Budget.MaxListCost, careful.Agent.System)
	}
	cst := openStream(t, ada, careful.ID)
	if _, err := ada.Beta.Sessions.Events.Send(ctx, careful.ID, anthropic.BetaSessionEventSendParams{Events: []anthropic.BetaManagedAgentsEventParamsUnion{say("tidy up")}}); err != nil {
		t.Fatalf("send the pirate a message: %v", err)
	}
	asked := cst.until(t, 30*time.Second, idle("requires_action"))
	askedFor := asked[len(asked)-1].AsSessionStatusIdle().StopReason.EventIDs
	if len(askedFor) != 1 {
		t.Fatalf("waiting for %v, want the Bash call", askedFor)
	}
	confirmAsked := anthropic.BetaSessionEventSendParams{Events: []anthropic.BetaManagedAgentsEventParamsUnion{
		anthropic.BetaManagedAgentsEventParamsOfUserToolConfirmation("allow", askedFor[0], "user.tool_confirmation"),
	}}
	_, err = ada.Beta.Sessions.Events.Send(ctx, careful.ID, confirmAsked)
	wantAPIError(t, "a user confirming an always_ask call", err, http.StatusForbidden, "permission_error")
	if _, err := rita.Beta.Sessions.Events.Send(ctx, careful.ID, confirmAsked); err != nil {
		t.Fatalf("a reviewer confirming the always_ask call: %v", err)
	}
	tidied := cst.until(t, 30*time.Second, idle("end_turn"))
	var tidyAnswer string
	for _, ev := range tidied {
		if ev.Type == "agent.tool_result" && ev.ToolUseID == askedFor[0] && ev.IsError {
			t.Errorf("the confirmed call's result is an error")
		}
		if m, ok := ev.AsAny().(anthropic.BetaManagedAgentsAgentMessageEvent); ok && len(m.Content) > 0 {
			tidyAnswer = m.Content[0].Text
		}
	}
	if want := "Tidied (pirate: true; tools: Bash,Read,Edit,Glob,Grep)"; tidyAnswer != want {
		t.Errorf("the pirate answered %q, want %q", tidyAnswer, want)
	}

	// corral run interrupted says the session goes on, and how to follow,
	// stop and find it; corral sessions finds it running.
	rctx, interrupted := context.WithCancel(ctx)
	defer interrupted()
	var stdout, stderr logtest.Buffer
	exited := make(chan int, 1)
	go func() {
		exited <- run(rctx, []string{"run", "--nats", p.url, "--tenant", "globex", "--user", "gus", "be slow"}, p.getenv, &stdout, &stderr)
	}()
	natstest.WaitFor(t, 30*time.Second, func() error {
		if !strings.Contains(stderr.String(), "→ Bash") {
			return fmt.Errorf("corral run shows %q", stderr.String())
		}
		return nil
	})
	interrupted()
	if code := <-exited; code != 130 {
		t.Errorf("corral run interrupted exited %d, want 130", code)
	}
	id := sessionOf(t, stderr.String())
	for _, want := range []string{"goes on", "corral logs --tenant globex -f " + id.String(), "corral stop --tenant globex " + id.String(), "corral sessions --tenant globex"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("corral run interrupted says\n%s\nwant %q", stderr.String(), want)
		}
	}
	if out := p.corralOK(t, "sessions", "--tenant", "globex", "--status", "running", "--since", "1h", "--limit", "1"); !strings.Contains(out, id.String()) {
		t.Errorf("corral sessions --status running:\n%s", out)
	}
	p.corralOK(t, "stop", "--tenant", "globex", id.String())
}
