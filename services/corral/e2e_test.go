package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
	"corral.dev/pkg/event"
	"corral.dev/pkg/logtest"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/sessionlog"
)

// platform is a `corral dev` started by a test, with a fake model provider.
type platform struct {
	url    string
	data   string
	model  *modeltest.Server
	getenv func(string) string
	log    *logtest.Buffer
	admin  nats.Option // how a test's own server signs in its admin
}

// startDev runs `corral dev` on a free port and a fresh data directory,
// with both providers pointed at a fake model server running script. env
// adds to (or overrides) the process environment.
// The reviewers of every test platform, and the token the client commands
// decide with (grace's).
const (
	graceToken = "grace-token-0123456789"
	heidiToken = "heidi-token-0123456789"
)

func startDev(t testing.TB, script modeltest.Script, env map[string]string) *platform {
	t.Helper()
	p, _ := startDevAt(t, natstest.FreeAddr(t), t.TempDir(), script, env)
	return p
}

// startDevAt runs `corral dev` listening on addr with its state in data.
// The returned stop ends it (the test's cleanup does too) and waits.
func startDevAt(t testing.TB, addr, data string, script modeltest.Script, env map[string]string) (*platform, func()) {
	t.Helper()
	fake := modeltest.New(t, script)
	p := &platform{data: data, model: fake, log: &logtest.Buffer{}}
	vars := map[string]string{
		"OPENAI_BASE_URL":    fake.URL() + "/v1",
		"OPENAI_API_KEY":     "sk-test",
		"ANTHROPIC_BASE_URL": fake.URL(),
		"ANTHROPIC_API_KEY":  "sk-ant-test",
		"CORRAL_MODEL":       "openai:gpt-test",
		"CORRAL_LOG_LEVEL":   "debug",
		// Tests run side by side: each platform's page on its own port.
		"CORRAL_APPROVAL_LISTEN": natstest.FreeAddr(t),
		"CORRAL_METRICS_LISTEN":  natstest.FreeAddr(t),
		"CORRAL_REVIEWER_TOKENS": "grace=" + graceToken + ",heidi=" + heidiToken,
		"CORRAL_REVIEWER_TOKEN":  graceToken,
	}
	for k, v := range env {
		vars[k] = v
	}
	p.getenv = func(k string) string {
		if v, ok := vars[k]; ok {
			return v
		}
		// The credential corral dev made, as the CLI finds it in the
		// default data directory.
		if v := devClientEnv(p.data)[k]; v != "" && k != "CORRAL_NATS_URL" {
			return v
		}
		return os.Getenv(k)
	}
	p.url = "nats://" + addr
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"dev", "--data", p.data, "--listen", addr}, p.getenv, p.log, p.log)
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case code := <-done:
				if code != 0 {
					t.Errorf("corral dev exited %d:\n%s", code, p.log)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("corral dev did not stop within 30s")
			}
			if t.Failed() {
				t.Logf("corral dev log:\n%s", p.log)
			}
		})
	}
	t.Cleanup(stop)
	natstest.WaitFor(t, 15*time.Second, func() error {
		select {
		case code := <-done:
			t.Fatalf("corral dev exited %d:\n%s", code, p.log)
		default:
		}
		nc, err := p.connect()
		if err != nil {
			return err
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		if _, err = js.Stream(context.Background(), bus.StreamEvents); err != nil {
			return err
		}
		if devClientEnv(p.data) == nil {
			return fmt.Errorf("no %s yet", clientEnvFile)
		}
		// The pages and the API serve once their services run, a moment
		// after the server: a test's first request must not beat them.
		for _, k := range []string{"CORRAL_GATEWAY_LISTEN", "CORRAL_APPROVAL_LISTEN"} {
			if addr := vars[k]; addr != "" {
				c, err := net.DialTimeout("tcp", addr, time.Second)
				if err != nil {
					return fmt.Errorf("%s %s: %w", k, addr, err)
				}
				c.Close()
			}
		}
		return nil
	})
	return p, stop
}

// corral runs a client command against the platform and returns its exit
// status, stdout and stderr.
func (p *platform) corral(t testing.TB, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stdout, stderr logtest.Buffer
	args = append(args[:1:1], append([]string{"--nats", p.url}, args[1:]...)...)
	code := run(ctx, args, p.getenv, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// sessionOf reads the session ID `corral run` printed on stderr.
func sessionOf(t testing.TB, stderr string) uuid.UUID {
	t.Helper()
	for _, line := range strings.Split(stderr, "\n") {
		if id, ok := strings.CutPrefix(line, "session "); ok {
			return uuid.MustParse(strings.TrimSpace(id))
		}
	}
	t.Fatalf("no session ID in stderr:\n%s", stderr)
	return uuid.Nil
}

// events returns a session's log, parsed.
func (p *platform) events(t testing.TB, session uuid.UUID) []any {
	t.Helper()
	nc, err := p.connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	msgs, err := bus.ReadAll(context.Background(), js, bus.StreamEvents, bus.SessionEvents("*", session))
	if err != nil {
		t.Fatal(err)
	}
	var out []any
	for _, e := range judged(t, js, msgs) {
		out = append(out, e)
	}
	return out
}

// judged returns the events msgs hold that the session log accepts, large
// ones fetched from where they are kept.
func judged(t testing.TB, js jetstream.JetStream, msgs []bus.Msg) []event.Event {
	t.Helper()
	l := sessionlog.New(js, sessionlog.Options{Reader: "test"})
	var out []event.Event
	for _, m := range msgs {
		e, err := l.Judge(context.Background(), m)
		if errors.Is(err, sessionlog.ErrRejected) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e.Event)
	}
	return out
}

// dispatches returns the calls dispatched among evs, in order: by their
// responses, or by tool.dispatched events.
func dispatches(evs []any) []*event.ToolDispatched {
	var out []*event.ToolDispatched
	for _, ev := range evs {
		switch ev := ev.(type) {
		case *event.ModelResponded:
			out = append(out, ev.Dispatches()...)
		case *event.ToolDispatched:
			out = append(out, ev)
		}
	}
	return out
}

// results returns the outputs of a session's tool calls, in order.
func results(evs []any) []*event.ToolCompleted {
	var out []*event.ToolCompleted
	for _, ev := range evs {
		if r, ok := ev.(*event.ToolCompleted); ok {
			out = append(out, r)
		}
	}
	return out
}

// steps is a script that makes the calls in order, one per turn, and then
// answers with the text answer(results) built from every tool result seen.
func steps(answer func(results []string) string, calls ...modeltest.Call) modeltest.Script {
	return func(c modeltest.Conversation) (modeltest.Turn, error) {
		n := modeltest.Turns(c)
		if n < len(calls) {
			return modeltest.Turn{Calls: []modeltest.Call{calls[n]}}, nil
		}
		var seen []string
		for _, m := range c.Messages {
			for _, r := range m.Results {
				seen = append(seen, r.Content)
			}
		}
		return modeltest.Turn{Text: answer(seen)}, nil
	}
}

func TestRunWritesReadsEditsAndAnswers(t *testing.T) {
	script := steps(func(seen []string) string { return "The file says: " + strings.TrimSpace(seen[len(seen)-1]) },
		modeltest.Call{Name: "Bash", Input: map[string]any{"command": "echo 'hello world' > /workspace/greeting.txt && echo written"}},
		modeltest.Call{Name: "Read", Input: map[string]any{"file_path": "/workspace/greeting.txt"}},
		modeltest.Call{Name: "Edit", Input: map[string]any{"file_path": "/workspace/greeting.txt", "old_string": "world", "new_string": "corral"}},
		modeltest.Call{Name: "Bash", Input: map[string]any{"command": "cat greeting.txt"}},
	)
	p := startDev(t, script, nil)
	for _, model := range []string{"openai:gpt-test", "anthropic:claude-test"} {
		t.Run(model, func(t *testing.T) {
			before := len(p.model.Requests())
			code, stdout, stderr := p.corral(t, "run", "--model", model, "--tenant", "acme", "--user", "ada", "make a greeting")
			if code != 0 {
				t.Fatalf("corral run exited %d\nstderr:\n%s", code, stderr)
			}
			if got, want := strings.TrimSpace(stdout), "The file says: hello corral"; got != want {
				t.Errorf("answer = %q, want %q", got, want)
			}
			for _, want := range []string{"→ Bash", "→ Read", "→ Edit", "hello world"} {
				if !strings.Contains(stderr, want) {
					t.Errorf("progress on stderr lacks %q:\n%s", want, stderr)
				}
			}
			session := sessionOf(t, stderr)
			data, err := os.ReadFile(fmt.Sprintf("%s/workspaces/acme/%s/greeting.txt", p.data, session))
			if err != nil {
				t.Fatal(err)
			}
			if string(data) != "hello corral\n" {
				t.Errorf("workspace file = %q, want %q", data, "hello corral\n")
			}
			reqs := p.model.Requests()[before:]
			if len(reqs) != 5 {
				t.Errorf("model asked %d times, want 5 (one per turn)", len(reqs))
			}
			if wantProvider := strings.SplitN(model, ":", 2)[0]; reqs[0].Provider != wantProvider {
				t.Errorf("provider = %q, want %q", reqs[0].Provider, wantProvider)
			}
			evs := p.events(t, session)
			counts := map[string]int{}
			for _, ev := range evs {
				counts[ev.(event.Event).Head().Type]++
			}
			// Each call is recorded as dispatched by an event of its own.
			want := map[string]int{
				event.TypeSessionRequested: 1, event.TypeModelResponded: 5, event.TypeToolDispatched: 4,
				event.TypeToolCompleted: 4, event.TypeSessionCompleted: 1,
			}
			for typ, n := range want {
				if counts[typ] != n {
					t.Errorf("%d %s events, want %d (all: %v)", counts[typ], typ, n, counts)
				}
			}
			if ds := dispatches(evs); len(ds) != 4 {
				t.Errorf("%d calls dispatched, want 4", len(ds))
			}
			for _, r := range results(evs) {
				if r.IsError {
					t.Errorf("%s call failed: %s", r.Name, r.Output)
				}
			}
			last := evs[len(evs)-1].(*event.SessionCompleted)
			if last.Usage.InputTokens == 0 || last.Usage.OutputTokens == 0 {
				t.Errorf("usage not recorded: %+v", last.Usage)
			}

			code, logs, stderr := p.corral(t, "logs", "--tenant", "acme", session.String())
			if code != 0 {
				t.Fatalf("corral logs exited %d: %s", code, stderr)
			}
			for _, want := range []string{"session.requested", "model.responded", "tool.dispatched", "tool.completed", "session.completed", "hello corral"} {
				if !strings.Contains(logs, want) {
					t.Errorf("corral logs lacks %q:\n%s", want, logs)
				}
			}
		})
	}
}

func TestRunJSONAndLogsFollow(t *testing.T) {
	p := startDev(t, steps(func([]string) string { return "done" },
		modeltest.Call{Name: "Bash", Input: map[string]any{"command": "echo hi"}}), nil)
	code, stdout, stderr := p.corral(t, "run", "--json", "say hi")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	var types []string
	var session uuid.UUID
	for _, l := range lines {
		var h event.Header
		if err := json.Unmarshal([]byte(l), &h); err != nil {
			t.Fatalf("line %q is not a JSON event: %v", l, err)
		}
		types = append(types, h.Type)
		session = h.Session
	}
	if types[0] != event.TypeSessionRequested || types[len(types)-1] != event.TypeSessionCompleted {
		t.Errorf("event types = %v", types)
	}
	code, out, stderr := p.corral(t, "logs", "-f", session.String())
	if code != 0 || !strings.Contains(out, "session.completed") {
		t.Errorf("logs -f exited %d with %q (stderr %q)", code, out, stderr)
	}
}

// Stopping `corral dev` in the middle of a session and starting it again on
// the same data directory finishes the session; the client following it
// rides through the restart, and the call that ran is not run again.
func TestDevRestartResumesSessions(t *testing.T) {
	addr, data := natstest.FreeAddr(t), t.TempDir()
	asked := make(chan struct{}, 1)
	// The first platform's model runs one call, then hangs on the next turn
	// until the platform is stopped under it.
	first := func(c modeltest.Conversation) (modeltest.Turn, error) {
		if modeltest.Turns(c) == 0 {
			return modeltest.Turn{Calls: []modeltest.Call{{Name: "Bash", Input: map[string]any{"command": "echo ran >> /workspace/log; cat /workspace/log"}}}}, nil
		}
		select {
		case asked <- struct{}{}:
		default:
		}
		return modeltest.Turn{}, fmt.Errorf("model unavailable")
	}
	env := map[string]string{"CORRAL_SHUTDOWN_GRACE": "200ms"}
	p, stop := startDevAt(t, addr, data, first, env)

	type result struct {
		code           int
		stdout, stderr string
	}
	client := make(chan result, 1)
	go func() {
		var stdout, stderr logtest.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		code := run(ctx, []string{"run", "--nats", p.url, "--tenant", "acme", "work"}, p.getenv, &stdout, &stderr)
		client <- result{code, stdout.String(), stderr.String()}
	}()
	select {
	case <-asked:
	case <-time.After(30 * time.Second):
		t.Fatalf("the model was never asked for turn 2:\n%s", p.log)
	}
	stop()

	second := steps(func(seen []string) string { return "resumed; log: " + strings.TrimSpace(seen[len(seen)-1]) })
	p2, _ := startDevAt(t, addr, data, second, env)
	var r result
	select {
	case r = <-client:
	case <-time.After(60 * time.Second):
		t.Fatalf("corral run did not finish after the restart:\n%s", p2.log)
	}
	if r.code != 0 {
		t.Fatalf("corral run exited %d:\n%s", r.code, r.stderr)
	}
	if got, want := strings.TrimSpace(r.stdout), "resumed; log: ran"; got != want {
		t.Errorf("answer = %q, want %q", got, want)
	}
	session := sessionOf(t, r.stderr)
	data2, err := os.ReadFile(fmt.Sprintf("%s/workspaces/acme/%s/log", data, session))
	if err != nil || string(data2) != "ran\n" {
		t.Errorf("workspace log = %q, %v; want the call run exactly once", data2, err)
	}
	if n := len(p2.model.Requests()); n != 1 {
		t.Errorf("the restarted platform asked the model %d times, want 1", n)
	}
}

// Large file contents and outputs are stored once in the object store; the
// session log itself stays small, and the session works as usual.
func TestLargePayloadsStayOutOfTheLog(t *testing.T) {
	content := strings.Repeat("0123456789abcdef\n", 12000) // about 200 KB
	p := startDev(t, steps(func(seen []string) string { return fmt.Sprintf("saw %d bytes", len(seen[len(seen)-1])) },
		modeltest.Call{Name: "Write", Input: map[string]any{"file_path": "/workspace/big.txt", "content": content}},
		modeltest.Call{Name: "Bash", Input: map[string]any{"command": "cat big.txt"}},
	), nil)
	code, stdout, stderr := p.corral(t, "run", "--tenant", "acme", "write a big file")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "saw 3") { // the output is capped near 30,000 bytes
		t.Errorf("answer = %q", stdout)
	}
	session := sessionOf(t, stderr)
	got, err := os.ReadFile(fmt.Sprintf("%s/workspaces/acme/%s/big.txt", p.data, session))
	if err != nil || string(got) != content {
		t.Fatalf("the file was not written whole (%d bytes, %v)", len(got), err)
	}
	// The model saw the whole file content it wrote when asked again.
	reqs := p.model.Requests()
	if in, _ := json.Marshal(reqs[len(reqs)-1].Messages[1].Calls[0].Input); len(in) < len(content) {
		t.Errorf("the replayed conversation lost the Write content")
	}

	nc, err := p.connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	stream, err := js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	offloaded := 0
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Data) > sessionlog.OffloadThreshold {
			t.Errorf("event %s is %d bytes in the log", m.Subject, len(m.Data))
		}
		if strings.Contains(string(m.Data), event.TypeOffloaded) {
			offloaded++
		}
	}
	if offloaded < 2 {
		t.Errorf("%d events offloaded, want at least the response carrying the file and the cat output", offloaded)
	}
}

// connect connects to the platform as its administrator, with the password
// corral dev keeps in its data directory.
func (p *platform) connect(opts ...nats.Option) (*nats.Conn, error) {
	if p.admin != nil { // a test's own server
		return nats.Connect(p.url, append([]nats.Option{p.admin}, opts...)...)
	}
	if p.data == "" { // a test's own server, which signs in no one
		return nats.Connect(p.url, opts...)
	}
	return connectDev(p.url, p.data, opts...)
}

// connectDev connects to the corral dev at url, whose state is in data, as
// its administrator.
func connectDev(url, data string, opts ...nats.Option) (*nats.Conn, error) {
	b, err := os.ReadFile(filepath.Join(data, devAuthFile))
	if err != nil {
		return nil, err
	}
	var a devAuth
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, err
	}
	return nats.Connect(url, append([]nats.Option{bus.SignIn(credential.UserAdmin, a.Passwords[credential.UserAdmin])}, opts...)...)
}
