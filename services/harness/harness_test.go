package harness

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/model"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/sessionlog"
)

// start runs a harness against a fresh embedded server and a fake model.
func start(t *testing.T, script modeltest.Script) (jetstream.JetStream, *modeltest.Server) {
	t.Helper()
	_, _, js := natstest.Run(t)
	fake := modeltest.New(t, script)
	runHarness(t, js, fake)
	return js, fake
}

// testCallKey is the harness's key for calls in these tests.
var testCallKey = func() string {
	_, key, _ := ed25519.GenerateKey(nil)
	return event.EncodeKey(key)
}()

func runHarness(t *testing.T, js jetstream.JetStream, fake *modeltest.Server) {
	t.Helper()
	runHarnessWith(t, js, fake, nil)
}

// runHarnessWith is runHarness with more of the environment set.
func runHarnessWith(t *testing.T, js jetstream.JetStream, fake *modeltest.Server, env map[string]string) {
	t.Helper()
	cfg, err := LoadConfig(func(k string) string {
		if v, ok := env[k]; ok {
			return v
		}
		if k == "CORRAL_HARNESS_SPEEDUPS" { // scripts/test.sh runs these tests with none too
			return os.Getenv(k)
		}
		return map[string]string{"OPENAI_BASE_URL": fake.URL(), "OPENAI_API_KEY": "k", "CORRAL_MODEL": "openai:m", "CORRAL_CALL_SIGNING_KEY": testCallKey}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg.RetryDelay = 10 * time.Millisecond
	svc, err := New(context.Background(), cfg, js, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	natstest.Serve(t, svc.Run)
}

func record(t *testing.T, js jetstream.JetStream, ev event.Event, msgID string) {
	t.Helper()
	w := sessionlog.Harness
	if r, ok := ev.(*event.ToolCompleted); ok && r.Service != "" {
		w = sessionlog.Writer(r.Service)
	}
	if err := sessionlog.New(js, sessionlog.Options{As: w}).Record(context.Background(), ev, msgID); err != nil {
		t.Fatal(err)
	}
}

func toolCalls(t *testing.T, js jetstream.JetStream) []event.ToolCall {
	t.Helper()
	// A work queue has no ordered consumers: read it message by message.
	ctx := context.Background()
	s, err := js.Stream(ctx, bus.StreamTools)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []event.ToolCall
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		var c event.ToolCall
		if err := json.Unmarshal(m.Data, &c); err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

// A harness that finds a recorded response it has not acted on (it died
// right after recording it) queues the response's calls and does not ask
// the model again: calls it must still dispatch, and calls the response
// recorded as dispatched, which the dead harness may not have queued. The
// step's trigger comes as never delivered, as a server that restarts from
// its store may deliver it again having lost the count of its deliveries.
func TestRecordedResponseIsReused(t *testing.T) {
	for _, service := range []string{"", bus.ServiceSandbox} {
		t.Run(cmp.Or(service, "undispatched"), func(t *testing.T) {
			_, _, js := natstest.Run(t)
			fake := modeltest.New(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
				return modeltest.Turn{}, fmt.Errorf("the model must not be asked")
			})
			session := uuid.Must(uuid.NewV7())
			call := uuid.Must(uuid.NewV7())
			// The log as a harness that died after recording the response
			// left it; the request's step was never acked, so the next
			// harness gets it.
			record(t, js, &event.SessionRequested{Header: event.NewHeader(event.TypeSessionRequested, "acme", session),
				Request: uuid.Must(uuid.NewV7()), User: "ada", Model: "openai:m", Prompt: "go"}, "req")
			record(t, js, &event.ModelResponded{
				Header: event.NewHeader(event.TypeModelResponded, "acme", session), Turn: 1, Model: "openai:m",
				Content: []model.Block{{Type: model.ToolUseBlock, ID: "call_1", Name: "Bash", Input: json.RawMessage(`{"command":"true"}`)}},
				Calls:   []event.Call{{ID: call, ToolUseID: "call_1", Name: "Bash", Service: service}},
			}, "turn1")
			runHarness(t, js, fake)

			natstest.WaitFor(t, 10*time.Second, func() error {
				calls := toolCalls(t, js)
				if len(calls) != 1 {
					return fmt.Errorf("%d calls on the queue, want 1", len(calls))
				}
				if calls[0].Call != call || calls[0].Name != "Bash" || calls[0].User != "ada" {
					return fmt.Errorf("call = %+v", calls[0])
				}
				return nil
			})
			if n := len(fake.Requests()); n != 0 {
				t.Errorf("the model was asked %d times, want 0", n)
			}
		})
	}
}

// A tool result recorded while its step is redelivered changes nothing: the
// model is asked once per turn however often a step runs.
func TestStepsAreIdempotent(t *testing.T) {
	js, fake := start(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
		if modeltest.Turns(c) == 0 {
			return modeltest.Turn{Calls: []modeltest.Call{{Name: "Bash", Input: map[string]any{"command": "true"}}}}, nil
		}
		return modeltest.Turn{Text: "done"}, nil
	})
	session := uuid.Must(uuid.NewV7())
	record(t, js, &event.SessionRequested{Header: event.NewHeader(event.TypeSessionRequested, "acme", session),
		Request: uuid.Must(uuid.NewV7()), User: "ada", Model: "openai:m", Prompt: "go"}, "req")
	var call event.ToolCall
	natstest.WaitFor(t, 10*time.Second, func() error {
		calls := toolCalls(t, js)
		if len(calls) != 1 {
			return fmt.Errorf("%d calls, want 1", len(calls))
		}
		call = calls[0]
		return nil
	})
	// The same result recorded three times under different message IDs,
	// as three redeliveries of a step would see it.
	for i := range 3 {
		record(t, js, &event.ToolCompleted{Header: event.NewHeader(event.TypeToolCompleted, "acme", session), Call: call.Call, Name: "Bash"}, fmt.Sprintf("r%d", i))
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		msgs, err := bus.ReadAll(context.Background(), js, bus.StreamEvents, sessionlog.SessionKind("acme", session, event.TypeSessionCompleted))
		if err != nil || len(msgs) == 0 {
			return fmt.Errorf("not completed (%v)", err)
		}
		return nil
	})
	// Let any straggling step run before counting.
	natstest.WaitFor(t, 5*time.Second, func() error {
		info, err := js.Consumer(context.Background(), bus.StreamEvents, bus.ConsumerHarnessSteps)
		if err != nil {
			return err
		}
		if p := info.CachedInfo().NumAckPending + int(info.CachedInfo().NumPending); p != 0 {
			return fmt.Errorf("%d steps pending", p)
		}
		return nil
	})
	if n := len(fake.Requests()); n != 2 {
		t.Errorf("the model was asked %d times, want 2", n)
	}
	msgs, _ := bus.ReadAll(context.Background(), js, bus.StreamEvents, sessionlog.SessionKind("acme", session, event.TypeSessionCompleted))
	if len(msgs) != 1 {
		t.Errorf("%d completions recorded, want 1", len(msgs))
	}
}

// request sends a request of ada of tenant acme, for the default model.
func request(t *testing.T, js jetstream.JetStream, session uuid.UUID, prompt string) {
	t.Helper()
	ask(t, js, "acme", "ada", session, "", prompt)
}

// completion waits for the session of acme to end, and returns its
// completion; it fails the test if the session failed.
func completion(t *testing.T, js jetstream.JetStream, session uuid.UUID) *event.SessionCompleted {
	t.Helper()
	evs := ended(t, js, "acme", session, 1)
	done := ofType[*event.SessionCompleted](evs)
	if len(done) == 0 {
		t.Fatalf("the session failed: %+v", failure(t, evs))
	}
	return done[0]
}

func sessionEvents(t *testing.T, js jetstream.JetStream, session uuid.UUID, typ string) []bus.Msg {
	t.Helper()
	msgs, err := bus.ReadAll(context.Background(), js, bus.StreamEvents, sessionlog.SessionKind("acme", session, typ))
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

// A follow-up sent while the session's calls are out waits for their
// results and reaches the model right after them; the session does not
// fail for it.
func TestFollowUpDuringATurnIsQueued(t *testing.T) {
	js, fake := start(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
		if modeltest.Turns(c) == 0 {
			return modeltest.Turn{Calls: []modeltest.Call{{Name: "Bash", Input: map[string]any{"command": "true"}}}}, nil
		}
		return modeltest.Turn{Text: "last said: " + c.Messages[len(c.Messages)-1].Text}, nil
	})
	session := uuid.Must(uuid.NewV7())
	request(t, js, session, "first")
	var call event.ToolCall
	natstest.WaitFor(t, 10*time.Second, func() error {
		calls := toolCalls(t, js)
		if len(calls) != 1 {
			return fmt.Errorf("%d calls", len(calls))
		}
		call = calls[0]
		return nil
	})
	request(t, js, session, "and also this")
	natstest.WaitFor(t, 10*time.Second, func() error {
		if n := len(sessionEvents(t, js, session, event.TypeSessionRequested)); n != 2 {
			return fmt.Errorf("%d requests recorded", n)
		}
		return nil
	})
	record(t, js, &event.ToolCompleted{Header: event.NewHeader(event.TypeToolCompleted, "acme", session), Call: call.Call, Name: "Bash", Output: "ok"}, "res")
	natstest.WaitFor(t, 10*time.Second, func() error {
		done := sessionEvents(t, js, session, event.TypeSessionCompleted)
		if len(done) == 0 {
			return fmt.Errorf("not completed")
		}
		var ev event.SessionCompleted
		_ = json.Unmarshal(done[0].Data, &ev)
		if ev.Answer != "last said: and also this" {
			return fmt.Errorf("answer %q", ev.Answer)
		}
		return nil
	})
	if n := len(sessionEvents(t, js, session, event.TypeSessionFailed)); n != 0 {
		t.Errorf("%d failures recorded", n)
	}
	if n := len(fake.Requests()); n != 2 {
		t.Errorf("model asked %d times, want 2", n)
	}
}

// A session that failed in the middle of a turn can be continued: the
// conversation still pairs every tool call with a result, and a second
// failure at the same turn is recorded, not dropped as a duplicate.
func TestFailedSessionCanBeContinued(t *testing.T) {
	js, fake := start(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
		if modeltest.Turns(c) == 0 {
			return modeltest.Turn{Calls: []modeltest.Call{{Name: "Bash", Input: map[string]any{"command": "true"}}}}, nil
		}
		return modeltest.Turn{Text: "fine"}, nil
	})
	session := uuid.Must(uuid.NewV7())
	request(t, js, session, "first")
	var call event.ToolCall
	natstest.WaitFor(t, 10*time.Second, func() error {
		calls := toolCalls(t, js)
		if len(calls) != 1 {
			return fmt.Errorf("%d calls", len(calls))
		}
		call = calls[0]
		return nil
	})
	// The model rejects the next two requests outright.
	fake.FailNext(400, "", 2)
	record(t, js, &event.ToolCompleted{Header: event.NewHeader(event.TypeToolCompleted, "acme", session), Call: call.Call, Name: "Bash", Output: "ok"}, "res")
	natstest.WaitFor(t, 10*time.Second, func() error {
		if n := len(sessionEvents(t, js, session, event.TypeSessionFailed)); n != 1 {
			return fmt.Errorf("%d failures", n)
		}
		return nil
	})
	request(t, js, session, "try again")
	natstest.WaitFor(t, 10*time.Second, func() error {
		if n := len(sessionEvents(t, js, session, event.TypeSessionFailed)); n != 2 {
			return fmt.Errorf("%d failures, want 2", n)
		}
		return nil
	})
	request(t, js, session, "once more")
	natstest.WaitFor(t, 10*time.Second, func() error {
		if len(sessionEvents(t, js, session, event.TypeSessionCompleted)) == 0 {
			return fmt.Errorf("not completed")
		}
		return nil
	})
	reqs := fake.Requests()
	last := reqs[len(reqs)-1]
	// first, the call, its result with "try again", "once more".
	if got := len(last.Messages); got < 4 {
		t.Fatalf("last conversation has %d messages", got)
	}
}

// A harness that has no approval service's key refuses the calls the
// policy holds for approval, saying why, and dispatches none of them.
func TestNoApprovalKeyRefusesHeldCalls(t *testing.T) {
	js, _ := start(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
		if modeltest.Turns(c) == 0 {
			return modeltest.Turn{Calls: []modeltest.Call{{Name: "Bash", Input: map[string]any{"command": "rm -rf /workspace/build"}}}}, nil
		}
		return modeltest.Turn{Text: "got: " + modeltest.Results(c)[0].Content}, nil
	})
	session := uuid.Must(uuid.NewV7())
	request(t, js, session, "clean")
	done := completion(t, js, session)
	if !strings.Contains(done.Answer, "takes no approvals, so it was not run") {
		t.Errorf("answer = %q", done.Answer)
	}
	if calls := toolCalls(t, js); len(calls) != 0 {
		t.Errorf("%d calls dispatched, want none", len(calls))
	}
	if n := len(sessionEvents(t, js, session, event.TypeApprovalRequested)); n != 0 {
		t.Errorf("%d approvals asked for, want none", n)
	}
}

// An Edit of a skill the session has not read is refused before any
// reviewer is asked: the memory service would refuse it anyway.
func TestUnreadSkillEditReachesNoReviewer(t *testing.T) {
	_, _, js := natstest.Run(t)
	fake := modeltest.New(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
		if modeltest.Turns(c) == 0 {
			return modeltest.Turn{Calls: []modeltest.Call{{Name: "Edit", Input: map[string]any{
				"file_path": "/skills/deploy/SKILL.md", "old_string": "make deploy", "new_string": "make deploy-canary", "replace_all": true,
			}}}}, nil
		}
		return modeltest.Turn{Text: "got: " + modeltest.Results(c)[0].Content}, nil
	})
	pub, _, _ := ed25519.GenerateKey(nil)
	runHarnessWith(t, js, fake, map[string]string{"CORRAL_APPROVAL_PUBLIC_KEY": event.EncodeKey(pub)})
	session := uuid.Must(uuid.NewV7())
	request(t, js, session, "edit the deploy skill")
	done := completion(t, js, session)
	if !strings.Contains(done.Answer, "/skills/deploy/SKILL.md: this session has not read it: Read it first") {
		t.Errorf("answer = %q", done.Answer)
	}
	if n := len(sessionEvents(t, js, session, event.TypeApprovalRequested)); n != 0 {
		t.Errorf("%d approvals asked for, want none", n)
	}
	if calls := toolCalls(t, js); len(calls) != 0 {
		t.Errorf("%d calls dispatched, want none", len(calls))
	}
}
