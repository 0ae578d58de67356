package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/natstest"
)

// echoResults answers with every tool result it was given, so a test can
// read what the model saw.
func echoResults(seen []string) string { return "results: " + strings.Join(seen, " | ") }

func TestUnknownModelFailsTheSession(t *testing.T) {
	p := startDev(t, steps(echoResults), map[string]string{"ANTHROPIC_API_KEY": "", "ANTHROPIC_BASE_URL": ""})
	tests := []struct{ model, want string }{
		{"gpt-4", "openai:<model> or anthropic:<model>"},
		{"mystery:x", "openai:<model> or anthropic:<model>"},
		{"anthropic:claude-x", "ANTHROPIC_API_KEY"},
	}
	for _, tc := range tests {
		code, _, stderr := p.corral(t, "run", "--model", tc.model, "hello")
		if code != 1 {
			t.Errorf("--model %s: exit %d, want 1", tc.model, code)
		}
		if !strings.Contains(stderr, "unknown_model") || !strings.Contains(stderr, tc.want) {
			t.Errorf("--model %s: stderr %q lacks unknown_model and %q", tc.model, stderr, tc.want)
		}
	}
	// The platform keeps serving.
	if code, stdout, stderr := p.corral(t, "run", "hello"); code != 0 || !strings.Contains(stdout, "results:") {
		t.Errorf("next session: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

func TestMalformedRequestsAreRefusedAndRecorded(t *testing.T) {
	p := startDev(t, steps(echoResults), nil)
	nc, err := p.connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	tests := []struct{ name, data, want string }{
		{"not JSON", `{"type": "corral.session.v1.request",`, "not JSON"},
		{"missing prompt", `{"type":"corral.session.v1.request","id":"` + uuid.NewString() + `","time":"2026-11-22T10:00:00Z","tenant":"acme","session":"SESSION","user":"ada"}`, "/prompt: missing"},
		{"wrong type", `{"type":"corral.session.v1.request","id":"` + uuid.NewString() + `","time":"2026-11-22T10:00:00Z","tenant":"acme","session":"SESSION","user":"ada","model":42,"prompt":"hi"}`, "/model: got number, want string"},
		{"unknown field", `{"type":"corral.session.v1.request","id":"` + uuid.NewString() + `","time":"2026-11-22T10:00:00Z","tenant":"acme","session":"SESSION","user":"ada","prompt":"hi","temperature":0.2}`, "/temperature: unknown field"},
		{"empty prompt", `{"type":"corral.session.v1.request","id":"` + uuid.NewString() + `","time":"2026-11-22T10:00:00Z","tenant":"acme","session":"SESSION","user":"ada","prompt":""}`, "/prompt: minLength"},
		{"session mismatch", `{"type":"corral.session.v1.request","id":"` + uuid.NewString() + `","time":"2026-11-22T10:00:00Z","tenant":"acme","session":"` + uuid.NewString() + `","user":"ada","prompt":"hi"}`, "does not match"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			session := uuid.Must(uuid.NewV7())
			data := strings.ReplaceAll(tc.data, "SESSION", session.String())
			if _, err := js.Publish(ctx, bus.RequestSubject("acme", session, "ada"), []byte(data)); err != nil {
				t.Fatal(err)
			}
			var failed *event.SessionFailed
			natstest.WaitFor(t, 10*time.Second, func() error {
				for _, ev := range p.events(t, session) {
					if f, ok := ev.(*event.SessionFailed); ok {
						failed = f
						return nil
					}
				}
				return context.DeadlineExceeded
			})
			if failed.Code != event.CodeInvalidRequest || !strings.HasPrefix(failed.Reason, "invalid request: ") || !strings.Contains(failed.Reason, tc.want) {
				t.Errorf("failure = %s %q, want %s mentioning %q", failed.Code, failed.Reason, event.CodeInvalidRequest, tc.want)
			}
		})
	}
	// Each dead letter is written once its session's failure is recorded.
	natstest.WaitFor(t, 10*time.Second, func() error {
		msgs, err := bus.ReadAll(ctx, js, bus.StreamDeadLetter, "deadletter.>")
		if err != nil {
			return err
		}
		if len(msgs) != len(tests) {
			return fmt.Errorf("%d dead letters, want %d", len(msgs), len(tests))
		}
		return nil
	})
	if code, stdout, stderr := p.corral(t, "run", "hello"); code != 0 || !strings.Contains(stdout, "results:") {
		t.Errorf("next session: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

func TestDevSaysWhatToDoWhenThePortIsTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var out syncBuffer
	code := run(context.Background(), []string{"dev", "--data", t.TempDir(), "--listen", ln.Addr().String()}, func(string) string { return "" }, &out, &out)
	if code == 0 {
		t.Fatal("corral dev on a taken port exited 0")
	}
	for _, want := range []string{"already in use", "corral dev --listen", "CORRAL_NATS_URL"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("message lacks %q:\n%s", want, out.String())
		}
	}
}

func TestDevSaysWhatToDoWhenThePagePortIsTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var out syncBuffer
	code := run(context.Background(), []string{"dev", "--data", t.TempDir(), "--listen", freeAddr(t), "--approvals", ln.Addr().String()}, func(string) string { return "" }, &out, &out)
	if code == 0 {
		t.Fatal("corral dev with the page's port taken exited 0")
	}
	for _, want := range []string{"reviewers' page cannot listen on " + ln.Addr().String(), "--approvals HOST:PORT"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("message lacks %q:\n%s", want, out.String())
		}
	}
}

func TestClientSaysWhenNoPlatformRuns(t *testing.T) {
	var out syncBuffer
	code := run(context.Background(), []string{"run", "--nats", "nats://" + freeAddr(t), "hi"}, func(string) string { return "" }, &out, &out)
	if code == 0 || !strings.Contains(out.String(), "corral dev") {
		t.Errorf("exit %d, output %q; want a failure that says to start corral dev", code, out.String())
	}
}
