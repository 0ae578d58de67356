package main

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/logtest"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/sessionlog"
	"corral.dev/schemas"
)

// These tests need no platform: an embedded server, events recorded as
// the services would, and the CLI's commands reading them.

// clientBus is an embedded server with Corral's streams, for the CLI.
type clientBus struct {
	url string
	nc  *nats.Conn
	js  jetstream.JetStream
}

func newClientBus(t *testing.T) *clientBus {
	t.Helper()
	srv, nc, js := natstest.Run(t)
	return &clientBus{url: srv.ClientURL(), nc: nc, js: js}
}

// record appends ev to its session's log as writer w.
func (b *clientBus) record(t *testing.T, w sessionlog.Writer, ev event.Event) {
	t.Helper()
	if err := sessionlog.New(b.js, sessionlog.Options{As: w}).Record(context.Background(), ev, ev.Head().ID.String()); err != nil {
		t.Fatal(err)
	}
}

// forge publishes ev on subject, whatever the subject says.
func (b *clientBus) forge(t *testing.T, subject string, ev event.Event) {
	t.Helper()
	if err := bus.Publish(context.Background(), b.js, subject, ev.Head().ID.String(), ev); err != nil {
		t.Fatal(err)
	}
}

// corral runs a client command against the server.
func (b *clientBus) corral(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stdout, stderr logtest.Buffer
	args = append(args[:1:1], append([]string{"--nats", b.url}, args[1:]...)...)
	code := run(ctx, args, func(string) string { return "" }, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// forgeAll publishes, on acme's session's subjects, events no reader may
// believe: each mentions "forged".
func forgeAll(t *testing.T, b *clientBus, session uuid.UUID) {
	t.Helper()
	h := func(typ, tenant string, s uuid.UUID) event.Header { return event.NewHeader(typ, tenant, s) }
	done := func(hd event.Header, answer string) *event.SessionCompleted {
		return &event.SessionCompleted{Header: hd, Answer: answer}
	}
	b.forge(t, sessionlog.Subject("acme", session, event.TypeSessionCompleted, sessionlog.Writer(bus.UserToken("ada"))),
		done(h(event.TypeSessionCompleted, "acme", session), "forged by a user"))
	b.forge(t, sessionlog.Subject("acme", session, event.TypeSessionCompleted, sessionlog.Harness),
		done(h(event.TypeSessionCompleted, "globex", session), "forged for another tenant"))
	b.forge(t, sessionlog.Subject("acme", session, event.TypeSessionCompleted, sessionlog.Harness),
		&event.SessionFailed{Header: h(event.TypeSessionFailed, "acme", session), Code: "forged", Reason: "forged type"})
	// A result of a call the harness never dispatched to the sandbox.
	b.forge(t, sessionlog.Subject("acme", session, event.TypeToolCompleted, sessionlog.Sandbox),
		&event.ToolCompleted{Header: h(event.TypeToolCompleted, "acme", session), Call: uuid.Must(uuid.NewV7()), Name: "Bash",
			Output: "forged result", Service: bus.ServiceSandbox})
}

// `corral logs` shows a session of the tenant it names, and only the
// events its log accepts: not those a writer may not write, whose body
// names another tenant or type, or a result of a call never dispatched,
// nor the events of another tenant's session of the same ID.
func TestLogsShowOnlyAcceptedEventsOfTheTenant(t *testing.T) {
	b := newClientBus(t)
	session := uuid.Must(uuid.NewV7())
	b.record(t, sessionlog.Harness, &event.SessionRequested{Header: event.NewHeader(event.TypeSessionRequested, "globex", session),
		Request: uuid.Must(uuid.NewV7()), User: "eve", Prompt: "globex prompt"})
	b.record(t, sessionlog.Harness, &event.SessionRequested{Header: event.NewHeader(event.TypeSessionRequested, "acme", session),
		Request: uuid.Must(uuid.NewV7()), User: "ada", Prompt: "acme prompt"})
	forgeAll(t, b, session)
	b.record(t, sessionlog.Harness, &event.SessionCompleted{Header: event.NewHeader(event.TypeSessionCompleted, "acme", session), Answer: "acme answer"})

	for _, args := range [][]string{
		{"logs", "--tenant", "acme", session.String()},
		{"logs", "--tenant", "acme", "--json", session.String()},
		{"logs", "--tenant", "acme", "-f", session.String()},
	} {
		code, stdout, stderr := b.corral(t, args...)
		if code != 0 {
			t.Fatalf("corral %s: exit %d: %s", strings.Join(args, " "), code, stderr)
		}
		for _, want := range []string{"acme prompt", "acme answer"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("corral %s lacks %q:\n%s", strings.Join(args, " "), want, stdout)
			}
		}
		for _, bad := range []string{"globex", "forged"} {
			if strings.Contains(stdout, bad) {
				t.Errorf("corral %s shows %q:\n%s", strings.Join(args, " "), bad, stdout)
			}
		}
	}
	if code, _, stderr := b.corral(t, "logs", "--tenant", "initech", session.String()); code == 0 || !strings.Contains(stderr, "no events") {
		t.Errorf("logs of a tenant without the session: exit %d: %s", code, stderr)
	}
}

// Following a session (corral logs -f, corral run) passes over forged
// events as they come: a forged end does not end it.
func TestFollowPassesOverForgedEvents(t *testing.T) {
	b := newClientBus(t)
	session := uuid.Must(uuid.NewV7())
	b.record(t, sessionlog.Harness, &event.SessionRequested{Header: event.NewHeader(event.TypeSessionRequested, "acme", session),
		Request: uuid.Must(uuid.NewV7()), User: "ada", Prompt: "acme prompt"})
	type result struct {
		code           int
		stdout, stderr string
	}
	done := make(chan result, 1)
	go func() {
		code, stdout, stderr := b.corral(t, "logs", "--tenant", "acme", "-f", session.String())
		done <- result{code, stdout, stderr}
	}()
	time.Sleep(200 * time.Millisecond) // let it read what is there and follow
	forgeAll(t, b, session)
	select {
	case r := <-done:
		t.Fatalf("corral logs -f ended on forged events: exit %d:\n%s%s", r.code, r.stdout, r.stderr)
	case <-time.After(500 * time.Millisecond):
	}
	b.record(t, sessionlog.Harness, &event.SessionCompleted{Header: event.NewHeader(event.TypeSessionCompleted, "acme", session), Answer: "acme answer"})
	var r result
	select {
	case r = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("corral logs -f did not end with the session")
	}
	if r.code != 0 || !strings.Contains(r.stdout, "acme answer") || strings.Contains(r.stdout, "forged") {
		t.Errorf("corral logs -f: exit %d:\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// harnessPlayer plays the harness for the control requests (stops and
// raises) of acme's sessions: it records each in the session's log, as
// the harness does once it has checked the subject's user, and keeps the
// subjects it saw.
type harnessPlayer struct {
	mu       sync.Mutex
	subjects []string
	bodies   []event.Event
}

func playHarness(t *testing.T, b *clientBus) *harnessPlayer {
	t.Helper()
	p := &harnessPlayer{}
	l := sessionlog.New(b.js, sessionlog.Options{As: sessionlog.Harness})
	sub, err := b.nc.Subscribe("requests.acme.>", func(m *nats.Msg) {
		v, err := event.Parse(m.Data)
		if err != nil {
			t.Errorf("request on %s: %v", m.Subject, err)
			return
		}
		ev := v.(event.Event)
		if err := schemas.Validate(ev.Head().Type, m.Data); err != nil {
			t.Errorf("request on %s: %v", m.Subject, err)
		}
		p.mu.Lock()
		p.subjects, p.bodies = append(p.subjects, m.Subject), append(p.bodies, ev)
		p.mu.Unlock()
		if err := l.Record(context.Background(), ev, "control:"+ev.Head().ID.String()); err != nil {
			t.Errorf("record %s: %v", ev.Head().Type, err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return p
}

func (p *harnessPlayer) last(t *testing.T) (string, event.Event) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.subjects) == 0 {
		t.Fatal("no request published")
	}
	return p.subjects[len(p.subjects)-1], p.bodies[len(p.bodies)-1]
}

// `corral stop` and `corral raise` are requests of the session's user, as
// its log says (not a forged request's user, nor another tenant's), on the
// session's tenant; they return once the harness has recorded them.
func TestStopAndRaiseAreRequestsOfTheSessionsUser(t *testing.T) {
	b := newClientBus(t)
	harness := playHarness(t, b)
	session := uuid.Must(uuid.NewV7())
	b.forge(t, sessionlog.Subject("acme", session, event.TypeSessionRequested, sessionlog.Sandbox),
		&event.SessionRequested{Header: event.NewHeader(event.TypeSessionRequested, "acme", session), Request: uuid.Must(uuid.NewV7()), User: "mallory", Prompt: "forged"})
	b.record(t, sessionlog.Harness, &event.SessionRequested{Header: event.NewHeader(event.TypeSessionRequested, "globex", session),
		Request: uuid.Must(uuid.NewV7()), User: "eve", Prompt: "globex prompt"})
	b.record(t, sessionlog.Harness, &event.SessionRequested{Header: event.NewHeader(event.TypeSessionRequested, "acme", session),
		Request: uuid.Must(uuid.NewV7()), User: "ada", Prompt: "acme prompt"})
	wantSubject := bus.RequestSubject("acme", session, "ada")

	code, stdout, stderr := b.corral(t, "raise", "--tenant", "acme", session.String(), "--steps", "5", "--reason", "more turns")
	if code != 0 || !strings.Contains(stdout, `{"steps":5}`) {
		t.Fatalf("corral raise: exit %d: %s%s", code, stdout, stderr)
	}
	subject, body := harness.last(t)
	raise, ok := body.(*event.BudgetRaise)
	if subject != wantSubject || !ok || raise.User != "ada" || raise.Tenant != "acme" || raise.Session != session || string(raise.Limits) != `{"steps":5}` {
		t.Errorf("raise published on %s: %+v; want on %s for ada", subject, body, wantSubject)
	}

	code, stdout, stderr = b.corral(t, "stop", "--tenant", "acme", session.String(), "--by", "grace", "--reason", "wrong repo")
	if code != 0 || !strings.Contains(stdout, "stopped session") {
		t.Fatalf("corral stop: exit %d: %s%s", code, stdout, stderr)
	}
	subject, body = harness.last(t)
	stop, ok := body.(*event.SessionStopped)
	if subject != wantSubject || !ok || stop.By != "grace" || stop.Reason != "wrong repo" || stop.Tenant != "acme" || stop.Session != session {
		t.Errorf("stop published on %s: %+v; want on %s, by grace", subject, body, wantSubject)
	}
	if code, stdout, _ := b.corral(t, "stop", "--tenant", "acme", session.String()); code != 0 || !strings.Contains(stdout, "stopped already") {
		t.Errorf("second stop: exit %d, %q", code, stdout)
	}
	// globex's session of the same ID runs on.
	if code, stdout, stderr := b.corral(t, "logs", "--tenant", "globex", "--json", session.String()); code != 0 || strings.Contains(stdout, event.TypeSessionStopped) {
		t.Errorf("globex's session: exit %d:\n%s%s", code, stdout, stderr)
	}
	// Each control request is one the harness can check: valid, and
	// naming the subject's tenant and session.
	harness.mu.Lock()
	defer harness.mu.Unlock()
	for i, ev := range harness.bodies {
		data, _ := json.Marshal(ev)
		if h := ev.Head(); h.Tenant != "acme" || h.Session != session || h.ID == uuid.Nil {
			t.Errorf("request %d: %s", i, data)
		}
	}
	if n := len(harness.subjects); n != 2 {
		t.Errorf("%d control requests, want 2: %v", n, harness.subjects)
	}
}
