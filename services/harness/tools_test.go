package harness

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/sessionlog"
)

// tools fakes the tool services: a consumer on each one's queue that takes
// only calls the harness signed for it, runs them with run, and records
// their results in the sessions' logs as that service does.
type tools struct {
	mu    sync.Mutex
	calls []ranCall
}

// ranCall is a call a fake tool service took, and which service it was.
type ranCall struct {
	service string
	call    *event.ToolCall
}

// runTool answers a call made to service: its result's output, whether it
// is an error, and, for a memory call, the file and version it saw. A nil
// result leaves the call unanswered.
type runTool func(service string, c *event.ToolCall) *event.ToolCompleted

// startTools runs the fake tool services on js until the test ends.
func startTools(t *testing.T, js jetstream.JetStream, run runTool) *tools {
	t.Helper()
	key, err := event.DecodePrivateKey(testCallKey)
	if err != nil {
		t.Fatal(err)
	}
	pub := key.Public().(ed25519.PublicKey)
	fake := &tools{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for service, durable := range map[string]string{bus.ServiceSandbox: bus.ConsumerSandboxCalls, bus.ServiceMemory: bus.ConsumerMemoryCalls} {
		logs := sessionlog.New(js, sessionlog.Options{As: sessionlog.Writer(service)})
		handle := func(ctx context.Context, m bus.Msg) error {
			c, err := bus.DecodeToolCall(m, pub)
			if err != nil {
				return err
			}
			fake.mu.Lock()
			fake.calls = append(fake.calls, ranCall{service, c})
			fake.mu.Unlock()
			r := run(service, c)
			if r == nil {
				return nil
			}
			r.Header = event.NewHeader(event.TypeToolCompleted, c.Tenant, c.Session)
			r.Call, r.Name, r.Service, r.User = c.Call, c.Name, service, c.User
			return logs.RecordResult(ctx, r, c)
		}
		wg.Go(func() {
			err := bus.Consume(ctx, js, bus.Consumer{
				Stream:  bus.StreamTools,
				Config:  jetstream.ConsumerConfig{Durable: durable, FilterSubject: bus.ToolFilter(service)},
				Handler: handle,
				Grace:   time.Millisecond,
				Logger:  slog.New(slog.DiscardHandler),
			})
			if err != nil {
				t.Errorf("%s: %v", service, err)
			}
		})
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	return fake
}

// ran returns the calls the fake services took, in order.
func (f *tools) ran() []ranCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]ranCall(nil), f.calls...)
}

// output answers every call with out.
func output(out string) runTool {
	return func(string, *event.ToolCall) *event.ToolCompleted { return &event.ToolCompleted{Output: out} }
}

// ask sends a request as user of tenant, for model ("" for the harness's
// default), and returns its session.
func ask(t *testing.T, js jetstream.JetStream, tenant, user string, session uuid.UUID, model, prompt string) uuid.UUID {
	t.Helper()
	req := event.Request{Header: event.NewHeader(event.TypeRequest, tenant, session), User: user, Model: model, Prompt: prompt}
	if err := bus.Publish(context.Background(), js, bus.RequestSubject(tenant, session, user), req.ID.String(), &req); err != nil {
		t.Fatal(err)
	}
	return session
}

// logOf returns a session's events, as a reader judges them.
func logOf(t *testing.T, js jetstream.JetStream, tenant string, session uuid.UUID) []event.Event {
	t.Helper()
	entries, _, err := sessionlog.New(js, sessionlog.Options{Reader: "test"}).ReadAll(context.Background(), tenant, session)
	if err != nil {
		t.Fatal(err)
	}
	var out []event.Event
	for _, e := range entries {
		out = append(out, e.Event)
	}
	return out
}

// ofType returns the events of evs that are Ts.
func ofType[T event.Event](evs []event.Event) []T {
	var out []T
	for _, ev := range evs {
		if e, ok := ev.(T); ok {
			out = append(out, e)
		}
	}
	return out
}

// ended waits for the session to complete or fail, and returns its log.
func ended(t *testing.T, js jetstream.JetStream, tenant string, session uuid.UUID, n int) []event.Event {
	t.Helper()
	var evs []event.Event
	natstest.WaitFor(t, 15*time.Second, func() error {
		evs = logOf(t, js, tenant, session)
		if got := len(ofType[*event.SessionCompleted](evs)) + len(ofType[*event.SessionFailed](evs)); got < n {
			return fmt.Errorf("session ended %d times, want %d", got, n)
		}
		return nil
	})
	return evs
}

// failure returns the session's last failure, or fails the test.
func failure(t *testing.T, evs []event.Event) *event.SessionFailed {
	t.Helper()
	fs := ofType[*event.SessionFailed](evs)
	if len(fs) == 0 {
		t.Fatalf("the session did not fail")
	}
	return fs[len(fs)-1]
}

// idle waits until the harness has handled every request and step.
func idle(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	natstest.WaitFor(t, 10*time.Second, func() error {
		for stream, durable := range map[string]string{bus.StreamEvents: bus.ConsumerHarnessSteps, bus.StreamRequests: bus.ConsumerHarnessRequests} {
			c, err := js.Consumer(context.Background(), stream, durable)
			if err != nil {
				return err
			}
			info, err := c.Info(context.Background())
			if err != nil {
				return err
			}
			if p := info.NumAckPending + int(info.NumPending); p != 0 {
				return fmt.Errorf("%d %s pending", p, durable)
			}
		}
		return nil
	})
}

// policyFile writes a policy and returns its file.
func policyFile(t *testing.T, yaml string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(f, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}
