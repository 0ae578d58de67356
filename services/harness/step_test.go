package harness

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/sessionlog"
)

// echo is a model that makes calls, one turn each, and then answers with
// every tool result it was given, joined by " | ".
func echo(turns ...[]modeltest.Call) modeltest.Script {
	return func(c modeltest.Conversation) (modeltest.Turn, error) {
		if n := modeltest.Turns(c); n < len(turns) {
			return modeltest.Turn{Calls: turns[n]}, nil
		}
		var seen []string
		for _, m := range c.Messages {
			for _, r := range m.Results {
				seen = append(seen, r.Content)
			}
		}
		return modeltest.Turn{Text: "results: " + strings.Join(seen, " | ")}, nil
	}
}

func bashCall(command string) modeltest.Call {
	return modeltest.Call{Name: "Bash", Input: map[string]any{"command": command}}
}

func fileCall(name, p string, more ...any) modeltest.Call {
	in := map[string]any{"file_path": p}
	for i := 0; i+1 < len(more); i += 2 {
		in[more[i].(string)] = more[i+1]
	}
	return modeltest.Call{Name: name, Input: in}
}

// A session runs turn by turn: each response's calls go, signed, to the
// service that runs them, the model gets their results in the order it
// made the calls, and the session completes with its answer, turns and
// usage. A Write of a memory expects the version the session last read.
func TestSessionRunsCallsTurnByTurn(t *testing.T) {
	_, _, js := natstest.Run(t)
	fake := modeltest.New(t, echo(
		[]modeltest.Call{bashCall("echo hi"), fileCall("Read", "/workspace/a.txt")},
		[]modeltest.Call{fileCall("Read", "/memories/notes.md")},
		[]modeltest.Call{fileCall("Write", "/memories/notes.md", "content", "new notes")},
	))
	runHarness(t, js, fake)
	ts := startTools(t, js, func(service string, c *event.ToolCall) *event.ToolCompleted {
		var in struct {
			Command  string `json:"command"`
			FilePath string `json:"file_path"`
		}
		_ = json.Unmarshal(c.Input, &in)
		switch {
		case c.Name == "Bash":
			return &event.ToolCompleted{Output: "ran " + in.Command}
		case service == bus.ServiceMemory && c.Name == "Read":
			return &event.ToolCompleted{Output: "old notes", Path: in.FilePath, Version: 7}
		case service == bus.ServiceMemory && c.Name == "Write":
			return &event.ToolCompleted{Output: fmt.Sprintf("wrote over version %d", c.ExpectVersion), Path: in.FilePath, Version: 8}
		}
		return &event.ToolCompleted{Output: "read " + in.FilePath}
	})
	session := ask(t, js, "acme", "ada", uuid.Must(uuid.NewV7()), "", "take notes")
	evs := ended(t, js, "acme", session, 1)

	done := ofType[*event.SessionCompleted](evs)
	if len(done) != 1 {
		t.Fatalf("the session did not complete: %v", ofType[*event.SessionFailed](evs))
	}
	if want := "results: ran echo hi | read /workspace/a.txt | old notes | wrote over version 7"; done[0].Answer != want {
		t.Errorf("answer = %q, want %q", done[0].Answer, want)
	}
	if done[0].Turns != 4 || done[0].Usage.InputTokens == 0 || done[0].Usage.OutputTokens == 0 {
		t.Errorf("completed after %d turns with usage %+v, want 4 turns and the tokens used", done[0].Turns, done[0].Usage)
	}
	ran := ts.ran()
	want := []struct {
		service, name string
		turn          int
	}{{bus.ServiceSandbox, "Bash", 1}, {bus.ServiceSandbox, "Read", 1}, {bus.ServiceMemory, "Read", 2}, {bus.ServiceMemory, "Write", 3}}
	if len(ran) != len(want) {
		t.Fatalf("%d calls ran, want %d: %+v", len(ran), len(want), ran)
	}
	for i, w := range want {
		r := ran[i]
		if i < 2 { // the first turn's two calls may run in either order
			r = ran[0]
			if ran[1].call.Name == w.name {
				r = ran[1]
			}
		}
		if r.service != w.service || r.call.Name != w.name || r.call.Turn != w.turn || r.call.User != "ada" {
			t.Errorf("call %d = %s %s of turn %d by %q, want %s %s of turn %d by ada", i, r.service, r.call.Name, r.call.Turn, r.call.User, w.service, w.name, w.turn)
		}
	}
	reqs := fake.Requests()
	if len(reqs) != 4 {
		t.Fatalf("the model was asked %d times, want 4", len(reqs))
	}
	if got := modeltest.Results(reqs[1]); len(got) != 2 || got[0].Content != "ran echo hi" || got[1].Content != "read /workspace/a.txt" {
		t.Errorf("the model's second turn saw %+v, want the results in the order of its calls", got)
	}
	if !strings.Contains(reqs[0].System, `user "ada" of tenant "acme"`) {
		t.Errorf("system prompt = %q", reqs[0].System)
	}
}

// A call that is not run gets an error result saying why, and never leaves
// the harness: arguments that do not parse, paths outside /workspace and
// /memories, a call the policy denies. The session goes on with the calls
// that are fine.
func TestRefusedCallsNeverLeaveTheHarness(t *testing.T) {
	_, _, js := natstest.Run(t)
	fake := modeltest.New(t, echo([]modeltest.Call{
		{Name: "Delete", Input: map[string]any{"path": "/workspace"}},
		{Name: "Bash", Input: map[string]any{"cmd": "ls"}},
		{Name: "Write", Input: map[string]any{"content": "x"}},
		{Name: "Read", Input: map[string]any{"file_path": 42}},
		{Name: "Bash", Input: `{"command": "ls"`},
		fileCall("Read", "/etc/passwd"),
		fileCall("Write", "/workspace/../etc/x", "content", "x"),
		fileCall("Write", "/memories/../etc/x", "content", "x"),
		fileCall("Read", "/workspace/.env"),
		bashCall("ls"),
	}))
	runHarnessWith(t, js, fake, map[string]string{"CORRAL_POLICY_FILE": policyFile(t, `
rules:
  - name: no-secrets
    when: tool == "Read" && path.endsWith(".env")
    decision: deny
    reason: environment files stay unread
`)})
	ts := startTools(t, js, output("fine"))
	session := ask(t, js, "acme", "ada", uuid.Must(uuid.NewV7()), "", "try things")
	evs := ended(t, js, "acme", session, 1)

	if ran := ts.ran(); len(ran) != 1 || ran[0].call.Name != "Bash" || string(ran[0].call.Input) != `{"command":"ls"}` {
		t.Errorf("calls run = %+v, want the one good Bash call", ran)
	}
	results := modeltest.Results(fake.Requests()[1])
	for i, want := range []string{
		`unknown tool "Delete"`,
		`unknown field "cmd"`,
		"file_path is required",
		"cannot unmarshal number",
		"invalid arguments",
		"outside /workspace",
		"outside /workspace",
		`".." segment`,
		"refused by policy (rule no-secrets): environment files stay unread",
		"fine",
	} {
		if i >= len(results) {
			t.Fatalf("the model saw %d results, want 10", len(results))
		}
		if r := results[i]; !strings.Contains(r.Content, want) || r.IsError != (want != "fine") {
			t.Errorf("result %d = %q (error %v), want it to say %q", i, r.Content, r.IsError, want)
		}
	}
	recorded := ofType[*event.ToolCompleted](evs)
	if len(recorded) != 10 {
		t.Errorf("%d results recorded, want 10", len(recorded))
	}
	if ds := ofType[*event.ToolDispatched](evs); len(ds) > 1 {
		t.Errorf("%d calls recorded as dispatched, want at most the good one", len(ds))
	}
}

// A call the policy holds waits for a reviewer: a decision runs it, or
// refuses it with the reviewer's reason, only if it verifies with the
// approval service's key for this very call and arguments. Others are
// ignored; calls not held go on meanwhile.
func TestHeldCallsWaitForASignedDecision(t *testing.T) {
	_, _, js := natstest.Run(t)
	fake := modeltest.New(t, echo([]modeltest.Call{bashCall("rm -rf /workspace/a"), bashCall("rm -rf /workspace/b"), bashCall("echo free")}))
	pub, key, _ := ed25519.GenerateKey(nil)
	_, otherKey, _ := ed25519.GenerateKey(nil)
	runHarnessWith(t, js, fake, map[string]string{"CORRAL_APPROVAL_PUBLIC_KEY": event.EncodeKey(pub)})
	ts := startTools(t, js, func(_ string, c *event.ToolCall) *event.ToolCompleted {
		return &event.ToolCompleted{Output: "ran " + string(c.Input)}
	})
	session := ask(t, js, "acme", "ada", uuid.Must(uuid.NewV7()), "", "clean both")

	asked := map[string]*event.ApprovalRequested{}
	natstest.WaitFor(t, 10*time.Second, func() error {
		for _, r := range ofType[*event.ApprovalRequested](logOf(t, js, "acme", session)) {
			asked[string(r.Input)] = r
		}
		if len(asked) != 2 || len(ts.ran()) != 1 {
			return fmt.Errorf("%d approvals asked for and %d calls run, want 2 and the free one", len(asked), len(ts.ran()))
		}
		return nil
	})
	a, b := asked[`{"command":"rm -rf /workspace/a"}`], asked[`{"command":"rm -rf /workspace/b"}`]
	if a == nil || b == nil || a.Rule != "risky-shell" || a.User != "ada" {
		t.Fatalf("approvals asked for = %+v", asked)
	}
	decide := func(r *event.ApprovalRequested, approved bool, reason string, sign func(*event.ApprovalDecided)) {
		d := &event.ApprovalDecided{Header: event.NewHeader(event.TypeApprovalDecided, "acme", session),
			Call: r.Call, ArgsHash: r.ArgsHash, Approved: approved, Reviewer: "grace", Reason: reason}
		sign(d)
		if err := sessionlog.New(js, sessionlog.Options{As: sessionlog.Approval}).Record(context.Background(), d, d.ID.String()); err != nil {
			t.Fatal(err)
		}
	}
	signed := func(d *event.ApprovalDecided) { d.Sign(key) }
	decide(a, true, "", func(d *event.ApprovalDecided) { d.Sign(otherKey) })
	decide(a, true, "", func(d *event.ApprovalDecided) { d.ArgsHash = b.ArgsHash; d.Sign(key) })
	decide(a, true, "", func(d *event.ApprovalDecided) { d.Sign(key); d.Reviewer = "mallory" })
	decide(a, true, "", func(d *event.ApprovalDecided) { d.Call = b.Call; d.Sign(key); d.Call = a.Call })
	// Steps of a session run in order: once b's denial is folded, so were
	// the decisions on a before it.
	decide(b, false, "not from here", signed)
	natstest.WaitFor(t, 10*time.Second, func() error {
		for _, r := range ofType[*event.ToolCompleted](logOf(t, js, "acme", session)) {
			if r.Call == b.Call {
				return nil
			}
		}
		return fmt.Errorf("no result of the denied call")
	})
	idle(t, js)
	if ran := ts.ran(); len(ran) != 1 {
		t.Fatalf("calls run on decisions that do not verify: %+v", ran)
	}
	decide(a, true, "", signed)
	evs := ended(t, js, "acme", session, 1)
	done := ofType[*event.SessionCompleted](evs)
	if len(done) != 1 {
		t.Fatalf("the session did not complete: %+v", ofType[*event.SessionFailed](evs))
	}
	for _, want := range []string{`ran {"command":"rm -rf /workspace/a"}`, "a reviewer (grace) denied this call, held under policy rule risky-shell: not from here", `ran {"command":"echo free"}`} {
		if !strings.Contains(done[0].Answer, want) {
			t.Errorf("answer %q lacks %q", done[0].Answer, want)
		}
	}
	if ran := ts.ran(); len(ran) != 2 || ran[1].call.Call != a.Call {
		t.Errorf("calls run = %+v, want the free one and the approved one", ran)
	}
}

// A stop recorded while the model is asked ends the session there: the
// response's calls are not run, and the model is not asked again.
// (A stop this harness takes itself waits for the step, as every request
// of the session does: see the admission gate in [Service.Run].)
func TestStopDuringAModelCall(t *testing.T) {
	asking, release := make(chan struct{}), make(chan struct{})
	_, _, js := natstest.Run(t)
	fake := modeltest.New(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
		if modeltest.Turns(c) == 0 {
			close(asking)
			<-release
			return modeltest.Turn{Calls: []modeltest.Call{bashCall("echo should not run")}}, nil
		}
		return modeltest.Turn{Text: "should not be asked"}, nil
	})
	runHarness(t, js, fake)
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // before the harness stops: its step waits for the model
	ts := startTools(t, js, output("ran"))
	session := ask(t, js, "acme", "ada", uuid.Must(uuid.NewV7()), "", "go")
	select {
	case <-asking:
	case <-time.After(10 * time.Second):
		t.Fatal("the model was never asked")
	}
	stopRecorded(t, js, session, "wrong repo")
	free()
	idle(t, js)
	evs := logOf(t, js, "acme", session)
	if ran := ts.ran(); len(ran) != 0 {
		t.Errorf("calls ran after the stop: %+v", ran)
	}
	if n := len(fake.Requests()); n != 1 {
		t.Errorf("the model was asked %d times, want once", n)
	}
	if n := len(ofType[*event.SessionCompleted](evs)) + len(ofType[*event.SessionFailed](evs)); n != 0 {
		t.Errorf("the stopped session ended %d more times", n)
	}
	if st := ofType[*event.SessionStopped](evs); len(st) != 1 || st[0].By != "ada" || st[0].Reason != "wrong repo" {
		t.Errorf("stops = %+v", st)
	}
}

// A follow-up continues a session that completed: the model sees the
// whole conversation. One that names a model no provider serves fails
// the session with unknown_model and is never seen; the session can be
// followed up again.
func TestFollowUpContinuesTheConversation(t *testing.T) {
	js, fake := start(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
		var said []string
		for _, m := range c.Messages {
			said = append(said, m.Role+": "+m.Text)
		}
		return modeltest.Turn{Text: strings.Join(said, "; ")}, nil
	})
	session := uuid.Must(uuid.NewV7())
	ask(t, js, "acme", "ada", session, "", "first")
	ended(t, js, "acme", session, 1)
	ask(t, js, "acme", "ada", session, "", "second")
	ended(t, js, "acme", session, 2)
	ask(t, js, "acme", "ada", session, "mystery:x", "lost")
	evs := ended(t, js, "acme", session, 3)
	if f := failure(t, evs); f.Code != event.CodeUnknownModel {
		t.Errorf("failure = %s %q, want %s", f.Code, f.Reason, event.CodeUnknownModel)
	}
	ask(t, js, "acme", "ada", session, "", "third")
	evs = ended(t, js, "acme", session, 4)
	done := ofType[*event.SessionCompleted](evs)
	if len(done) != 3 {
		t.Fatalf("%d completions, want 3", len(done))
	}
	if want := "user: first; assistant: user: first; user: second; assistant: user: first; assistant: user: first; user: second; user: third"; done[2].Answer != want {
		t.Errorf("last answer = %q\nwant %q", done[2].Answer, want)
	}
	if n := len(fake.Requests()); n != 3 {
		t.Errorf("the model was asked %d times, want 3", n)
	}
}

// A session whose model no provider serves fails with unknown_model, or
// provider_not_configured when it names a provider the harness has no key
// for, saying what to do, before the model is asked; the harness goes on
// serving.
func TestUnknownModelFailsTheSession(t *testing.T) {
	js, fake := start(t, nil)
	for _, tc := range []struct{ model, code, want string }{
		{"gpt-4", event.CodeUnknownModel, "openai:<model> or anthropic:<model>"},
		{"mystery:x", event.CodeUnknownModel, "openai:<model> or anthropic:<model>"},
		{"anthropic:claude-x", event.CodeNotConfigured, "set ANTHROPIC_API_KEY in the harness's environment"},
	} {
		session := ask(t, js, "acme", "ada", uuid.Must(uuid.NewV7()), tc.model, "hello")
		f := failure(t, ended(t, js, "acme", session, 1))
		if f.Code != tc.code || !strings.Contains(f.Reason, tc.want) {
			t.Errorf("model %s: failure = %s %q, want %s saying %q", tc.model, f.Code, f.Reason, tc.code, tc.want)
		}
	}
	if n := len(fake.Requests()); n != 0 {
		t.Errorf("the model was asked %d times", n)
	}
	session := ask(t, js, "acme", "ada", uuid.Must(uuid.NewV7()), "", "hello")
	if done := ofType[*event.SessionCompleted](ended(t, js, "acme", session, 1)); len(done) != 1 || done[0].Answer != "ok" {
		t.Errorf("the next session = %+v, want it answered", done)
	}
}

// A request published several times starts one session: it is recorded
// once, and the model asked once.
func TestDuplicateRequestStartsOneSession(t *testing.T) {
	js, fake := start(t, nil)
	session := uuid.Must(uuid.NewV7())
	req := event.Request{Header: event.NewHeader(event.TypeRequest, "acme", session), User: "ada", Prompt: "go"}
	data, _ := json.Marshal(&req)
	for range 3 {
		// Without a message ID, as a client that retries after losing
		// its ack might send it: the server does not drop the copies.
		if _, err := js.Publish(context.Background(), bus.RequestSubject("acme", session, "ada"), data); err != nil {
			t.Fatal(err)
		}
	}
	ended(t, js, "acme", session, 1)
	idle(t, js)
	evs := logOf(t, js, "acme", session)
	if n := len(ofType[*event.SessionRequested](evs)); n != 1 {
		t.Errorf("%d requests recorded, want 1", n)
	}
	if n := len(ofType[*event.SessionCompleted](evs)); n != 1 {
		t.Errorf("%d completions recorded, want 1", n)
	}
	if n := len(fake.Requests()); n != 1 {
		t.Errorf("the model was asked %d times, want once", n)
	}
}

// A dispatch is recorded one way, whether the speed-ups are on or off: a
// tool.dispatched event per call, after the response that made it (right
// after, when nothing comes in between) and before its result; the
// response names no service.
func TestDispatchIsRecordedOneWay(t *testing.T) {
	kinds := map[string][]string{}
	for _, speedups := range []string{"all", "none"} {
		t.Run(speedups, func(t *testing.T) {
			_, _, js := natstest.Run(t)
			fake := modeltest.New(t, echo([]modeltest.Call{bashCall("echo hi"), fileCall("Read", "/memories/notes.md")}))
			runHarnessWith(t, js, fake, map[string]string{"CORRAL_HARNESS_SPEEDUPS": speedups})
			startTools(t, js, func(string, *event.ToolCall) *event.ToolCompleted { return &event.ToolCompleted{Output: "ok"} })
			session := ask(t, js, "acme", "ada", uuid.Must(uuid.NewV7()), "", "two calls")
			ended(t, js, "acme", session, 1)
			entries, _, err := sessionlog.New(js, sessionlog.Options{Reader: "test"}).ReadAll(context.Background(), "acme", session)
			if err != nil {
				t.Fatal(err)
			}
			var responded uint64
			dispatched := map[uuid.UUID]uint64{}
			for _, e := range entries {
				switch ev := e.Event.(type) {
				case *event.ModelResponded:
					for _, c := range ev.Calls {
						if c.Service != "" {
							t.Errorf("the response names %s's service %q", c.Name, c.Service)
						}
					}
					if len(ev.Calls) > 0 {
						responded = e.Seq
					}
				case *event.ToolDispatched:
					if _, ok := dispatched[ev.Call]; ok {
						t.Errorf("call %s recorded as dispatched twice", ev.Call)
					}
					dispatched[ev.Call] = e.Seq
				case *event.ToolCompleted:
					if d, ok := dispatched[ev.Call]; !ok || d > e.Seq {
						t.Errorf("the result of %s comes before its dispatch", ev.Call)
					}
				}
				if e.Type != event.TypeToolCompleted { // results come in either order
					kinds[speedups] = append(kinds[speedups], event.Kind(e.Type))
				}
			}
			if len(dispatched) != 2 {
				t.Fatalf("%d calls recorded as dispatched, want 2", len(dispatched))
			}
			for call, seq := range dispatched {
				if seq != responded+1 && seq != responded+2 {
					t.Errorf("call %s recorded as dispatched at %d, not right after its response at %d", call, seq, responded)
				}
			}
		})
	}
	if !slices.Equal(kinds["all"], kinds["none"]) {
		t.Errorf("the logs differ with the speed-ups on and off:\n  on:  %v\n  off: %v", kinds["all"], kinds["none"])
	}
}

// stopRecorded sends ada's stop of acme's session as corral stop sends it,
// while a step waits for the model, and waits until it is recorded: at
// once, not after the step.
func stopRecorded(t *testing.T, js jetstream.JetStream, session uuid.UUID, reason string) {
	t.Helper()
	stop := event.SessionStopped{Header: event.NewHeader(event.TypeSessionStopped, "acme", session), By: "ada", Reason: reason}
	if err := bus.Publish(context.Background(), js, bus.RequestSubject("acme", session, "ada"), stop.ID.String(), &stop); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if st := ofType[*event.SessionStopped](logOf(t, js, "acme", session)); len(st) == 0 {
			return fmt.Errorf("the stop is not recorded while the model is asked")
		}
		return nil
	})
}
