package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/logtest"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/policy"
)

// echoPrompt answers each session with its prompt; a prompt starting with
// "tool" first runs the Bash command after it.
func echoPrompt(c modeltest.Conversation) (modeltest.Turn, error) {
	prompt := c.Messages[0].Text
	if cmd, ok := strings.CutPrefix(prompt, "tool "); ok && modeltest.Turns(c) == 0 {
		return modeltest.Turn{Calls: []modeltest.Call{{Name: "Bash", Input: map[string]any{"command": cmd}}}}, nil
	}
	answer := "answer to " + prompt
	if rs := modeltest.Results(c); len(rs) > 0 {
		answer += ": " + strings.TrimSpace(rs[0].Content)
	}
	return modeltest.Turn{Text: answer}, nil
}

// todaysBatch is the name of the batch of a file writeJobs wrote, when
// submitted today.
func todaysBatch() string { return defaultBatch("jobs.jsonl", time.Now()) }

func writeJobs(t *testing.T, lines ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "jobs.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// requestsRecorded counts the SessionRequested events of each session.
func (p *platform) requestsRecorded(t *testing.T, sessions ...uuid.UUID) map[uuid.UUID]int {
	t.Helper()
	out := make(map[uuid.UUID]int)
	for _, s := range sessions {
		for _, ev := range p.events(t, s) {
			if _, ok := ev.(*event.SessionRequested); ok {
				out[s]++
			}
		}
	}
	return out
}

func TestBatchSubmitStatusAndResults(t *testing.T) {
	p := startDev(t, echoPrompt, nil)
	file := writeJobs(t,
		`{"id": "a", "prompt": "alpha"}`,
		``,
		`{"id": "b", "prompt": "tool echo from-b", "user": "ada"}`,
		`{"id": "c", "prompt": "gamma", "tenant": "acme", "model": "anthropic:claude-test"}`,
		`{"id": "d", "prompt": "delta", "model": "mystery:x"}`,
	)
	ids := map[string]uuid.UUID{}
	for _, j := range []struct{ tenant, id string }{{"default", "a"}, {"default", "b"}, {"acme", "c"}, {"default", "d"}} {
		ids[j.id], _ = jobSession(j.tenant, todaysBatch(), j.id)
	}

	code, stdout, stderr := p.corral(t, "batch", "submit", file)
	if code != 1 {
		t.Fatalf("submit: exit %d, want 1 (job d fails)\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	for _, want := range []string{"4 jobs: 4 submitted now, 0 before", "[0/4] finished", "[4/4]", "a: completed",
		"d: failed (unknown_model)", "4 jobs: 3 completed, 1 failed", "1 of 4 jobs did not complete"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("submit's stderr lacks %q:\n%s", want, stderr)
		}
	}
	asked := len(p.model.Requests())
	if asked != 4 { // a, c: one turn; b: two; d: none
		t.Errorf("the model was asked %d times, want 4", asked)
	}
	wantRequests := map[uuid.UUID]int{ids["a"]: 1, ids["b"]: 1, ids["c"]: 1}
	if got := p.requestsRecorded(t, ids["a"], ids["b"], ids["c"], ids["d"]); fmt.Sprint(got) != fmt.Sprint(wantRequests) {
		t.Errorf("requests recorded = %v, want %v", got, wantRequests)
	}

	// Submitting the file again starts nothing.
	code, _, stderr = p.corral(t, "batch", "submit", file)
	if code != 1 || !strings.Contains(stderr, "4 jobs: 0 submitted now, 4 before") || !strings.Contains(stderr, "[4/4] finished") {
		t.Errorf("re-submit: exit %d, stderr:\n%s", code, stderr)
	}
	if got := p.requestsRecorded(t, ids["a"], ids["b"], ids["c"], ids["d"]); fmt.Sprint(got) != fmt.Sprint(wantRequests) {
		t.Errorf("after a re-submit, requests recorded = %v, want %v", got, wantRequests)
	}
	if n := len(p.model.Requests()); n != asked {
		t.Errorf("a re-submit asked the model %d more times", n-asked)
	}

	// A job whose id was used before for another prompt is refused, and
	// so is the rest of its file.
	other := writeJobs(t, `{"id": "e", "prompt": "epsilon"}`, `{"id": "a", "prompt": "not alpha"}`)
	code, _, stderr = p.corral(t, "batch", "submit", other)
	if code != 1 || !strings.Contains(stderr, `line 2: job "a" was submitted before with a different prompt`) {
		t.Errorf("a conflicting file: exit %d, stderr:\n%s", code, stderr)
	}
	// Its job a is in conflict: the session ran another prompt, whose
	// answer is not the job's.
	code, stdout, _ = p.corral(t, "batch", "status", other)
	if code != 0 || stdout != "batch "+todaysBatch()+": 2 jobs: 0 pending, 0 running, 0 completed, 0 failed, 1 conflict, 1 not_submitted\n" {
		t.Errorf("status of the conflicting file: exit %d, %q", code, stdout)
	}

	code, stdout, stderr = p.corral(t, "batch", "status", "--verbose", file)
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, stderr)
	}
	if !strings.HasPrefix(stdout, "batch "+todaysBatch()+": 4 jobs: 0 pending, 0 running, 3 completed, 1 failed\n") {
		t.Errorf("status = %q", stdout)
	}
	for _, want := range []string{ids["b"].String() + "  completed  answer to tool echo from-b: from-b", "unknown_model: "} {
		if !strings.Contains(stdout, want) {
			t.Errorf("status --verbose lacks %q:\n%s", want, stdout)
		}
	}

	out := filepath.Join(t.TempDir(), "results.jsonl")
	if code, _, stderr := p.corral(t, "batch", "results", file, "--out", out); code != 0 {
		t.Fatalf("results: exit %d: %s", code, stderr)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d result lines, want 4:\n%s", len(lines), data)
	}
	prices := policy.Default()
	want := map[string]jobResult{
		"a": {Tenant: "default", Status: "completed", Answer: "answer to alpha", Turns: 1},
		"b": {Tenant: "default", Status: "completed", Answer: "answer to tool echo from-b: from-b", Turns: 2},
		"c": {Tenant: "acme", Status: "completed", Answer: "answer to gamma", Turns: 1},
		"d": {Tenant: "default", Status: "failed", Code: event.CodeUnknownModel},
	}
	for i, l := range lines {
		var got jobResult
		if err := json.Unmarshal([]byte(l), &got); err != nil {
			t.Fatalf("line %d %q: %v", i+1, l, err)
		}
		w, ok := want[got.ID]
		if !ok || got.ID != []string{"a", "b", "c", "d"}[i] {
			t.Errorf("line %d is job %q, want the file's order", i+1, got.ID)
			continue
		}
		if got.Session != ids[got.ID] || got.Tenant != w.Tenant || got.Status != w.Status || got.Answer != w.Answer ||
			got.Turns != w.Turns || got.Code != w.Code {
			t.Errorf("job %s: got %+v, want %+v", got.ID, got, w)
		}
		var cost float64
		var tokens int
		for _, ev := range p.events(t, got.Session) {
			if r, ok := ev.(*event.ModelResponded); ok {
				cost += prices.Cost(r.Model, r.Usage)
				tokens += r.Usage.InputTokens + r.Usage.OutputTokens
			}
		}
		if math.Abs(got.CostUSD-cost) > 1e-12 || got.Usage.InputTokens+got.Usage.OutputTokens != tokens {
			t.Errorf("job %s: cost %v, %d tokens; its log says %v, %d", got.ID, got.CostUSD, got.Usage.InputTokens+got.Usage.OutputTokens, cost, tokens)
		}
		if got.Status == "completed" && got.CostUSD <= 0 {
			t.Errorf("job %s: cost %v, want more than 0", got.ID, got.CostUSD)
		}
		if got.ID == "d" && !strings.Contains(got.Error, "openai:<model> or anthropic:<model>") {
			t.Errorf("job d: error %q does not say why", got.Error)
		}
	}
}

// On a terminal, submit shows a progress bar, with a failed job's line
// kept above it, instead of a line per finished job.
func TestBatchProgressBarOnATerminal(t *testing.T) {
	p := startDev(t, echoPrompt, nil)
	file := writeJobs(t,
		`{"id": "one", "prompt": "alpha"}`,
		`{"id": "two", "prompt": "beta"}`,
		`{"id": "bad", "prompt": "gamma", "model": "mystery:x"}`,
	)
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 24, Cols: 100}); err != nil {
		t.Fatal(err)
	}
	var screen logtest.Buffer
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(&screen, ptmx) // ends with EIO once tty is closed
	}()
	var stdout logtest.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code := run(ctx, []string{"batch", "submit", "--nats", p.url, file}, p.getenv, &stdout, tty)
	tty.Close()
	<-copied
	out := screen.String()
	if code != 1 {
		t.Fatalf("submit on a terminal: exit %d, want 1 (job bad fails):\n%q", code, out)
	}
	for _, want := range []string{"jobs (1 failed)", "3/3", "bad: failed (unknown_model)", "3 jobs: 2 completed, 1 failed"} {
		if !strings.Contains(out, want) {
			t.Errorf("the terminal lacks %q:\n%q", want, out)
		}
	}
	if strings.Contains(out, "finished") || !strings.Contains(out, "\r") {
		t.Errorf("no bar redrawn in place, or a line per finished job:\n%q", out)
	}
}

func TestBatchRefusesBadFiles(t *testing.T) {
	p := startDev(t, echoPrompt, nil)
	good := `{"id": "a", "prompt": "alpha"}`
	tests := []struct {
		name  string
		lines []string
		want  []string
	}{
		{"not JSON", []string{good, `{"id": "b", "prompt": "beta"`}, []string{"line 2: not JSON"}},
		{"no prompt", []string{good, ``, `{"id": "b"}`}, []string{`line 3: job "b": prompt: missing`}},
		{"no id", []string{`{"prompt": "x"}`, good}, []string{"line 1: id: missing"}},
		{"wrong type", []string{good, `{"id": "b", "prompt": 7}`}, []string{"line 2: prompt: got number, want string"}},
		{"unknown field", []string{`{"id": "a", "prompt": "x", "promt": "y"}`}, []string{`line 1: unknown field "promt"`}},
		{"not an object", []string{`["a"]`}, []string{"line 1: got array, want an object"}},
		{"bad tenant", []string{`{"id": "a", "prompt": "x", "tenant": "Acme!"}`}, []string{`line 1: job "a": tenant: invalid tenant`}},
		{"long user", []string{`{"id": "a", "prompt": "x", "model": ""}`, `{"id": "b", "prompt": "x", "user": "` + strings.Repeat("u", 300) + `"}`}, []string{`line 2: job "b": /user: maxLength`}},
		{"duplicate ids", []string{good, `{"id": "b", "prompt": "beta"}`, good}, []string{`line 3: id "a" repeats line 1`}},
		{"every problem", []string{`{`, `{"id": "x"}`, good, good}, []string{"line 1: not JSON", "line 2:", "line 4:"}},
		{"empty", []string{``}, []string{"no jobs"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := p.corral(t, "batch", "submit", writeJobs(t, tc.lines...))
			if code != 2 {
				t.Errorf("exit %d, want 2: %s", code, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
		})
	}
	nc, err := p.connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	for _, name := range []string{bus.StreamRequests, bus.StreamEvents} {
		s, err := js.Stream(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		if info, err := s.Info(context.Background()); err != nil || info.State.LastSeq != 0 {
			t.Errorf("%s: %d messages were published (%v), want none", name, info.State.LastSeq, err)
		}
	}
	if code, _, stderr := p.corral(t, "batch", "submit", writeJobs(t, good)); code != 0 {
		t.Errorf("a good file: exit %d: %s", code, stderr)
	}
}

// A submit interrupted while its jobs run, or before it published them
// all, goes on from where it was when run again: nothing starts twice.
func TestBatchInterruptedSubmitResumes(t *testing.T) {
	p := startDev(t, echoPrompt, nil)
	wait := `tool while [ ! -f /workspace/go ]; do sleep 0.05; done; echo released`
	lines := []string{
		`{"id": "fast-1", "prompt": "one"}`,
		`{"id": "fast-2", "prompt": "two"}`,
		`{"id": "slow-1", "prompt": "` + wait + `"}`,
		`{"id": "slow-2", "prompt": "` + wait + `"}`,
		`{"id": "late", "prompt": "late"}`,
	}
	var sessions []uuid.UUID
	for _, id := range []string{"fast-1", "fast-2", "slow-1", "slow-2", "late"} {
		s, _ := jobSession("default", todaysBatch(), id)
		sessions = append(sessions, s)
	}

	// A submit that got through four jobs' requests before it died.
	code, _, stderr := p.corral(t, "batch", "submit", "--no-wait", writeJobs(t, lines[:4]...))
	if code != 0 || !strings.Contains(stderr, "4 jobs: 4 submitted now, 0 before") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	// Run again once the harness has started those four: a submit that
	// looks at a job while the harness takes its request off the queue
	// and has not yet recorded it finds it in neither, and sends it again
	// (the harness records it once: see the end of this test), counting
	// it as submitted now.
	natstest.WaitFor(t, 30*time.Second, func() error {
		got := p.requestsRecorded(t, sessions[:4]...)
		for _, s := range sessions[:4] {
			if got[s] != 1 {
				return fmt.Errorf("session %s: %d requests recorded", s, got[s])
			}
		}
		return nil
	})
	// The whole file, interrupted once the fast jobs are done.
	file := writeJobs(t, lines...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out logtest.Buffer
	exited := make(chan int, 1)
	go func() { exited <- run(ctx, []string{"batch", "submit", "--nats", p.url, file}, p.getenv, &out, &out) }()
	natstest.WaitFor(t, 30*time.Second, func() error {
		if strings.Contains(out.String(), "[3/5]") {
			return nil
		}
		return fmt.Errorf("the fast jobs did not finish:\n%s", out.String())
	})
	cancel()
	select {
	case code := <-exited:
		if code != 130 || !strings.Contains(out.String(), "interrupted with 3 of 5 jobs finished") {
			t.Errorf("interrupted submit: exit %d:\n%s", code, out.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the submit did not stop when interrupted")
	}
	if !strings.Contains(out.String(), "5 jobs: 1 submitted now, 4 before") {
		t.Errorf("the second submit did not find the jobs submitted before:\n%s", out.String())
	}

	// Run again, it finds the fast jobs finished; the slow ones finish
	// once released, while it follows them.
	var resumed logtest.Buffer
	go func() {
		exited <- run(context.Background(), []string{"batch", "submit", "--nats", p.url, file}, p.getenv, &resumed, &resumed)
	}()
	natstest.WaitFor(t, 30*time.Second, func() error {
		if strings.Contains(resumed.String(), "[3/5] finished") {
			return nil
		}
		return fmt.Errorf("the resumed submit did not find the fast jobs finished:\n%s", resumed.String())
	})
	for _, s := range sessions[2:4] {
		// Once its command runs, the job waits for this file.
		dir := filepath.Join(p.data, "workspaces", "default", s.String())
		natstest.WaitFor(t, 30*time.Second, func() error { _, err := os.Stat(dir); return err })
		if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case code := <-exited:
		if code != 0 {
			t.Fatalf("resumed submit: exit %d:\n%s", code, resumed.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("the resumed submit did not end:\n%s", resumed.String())
	}
	for _, want := range []string{"5 jobs: 0 submitted now, 5 before", "slow-1: completed", "slow-2: completed", "5 jobs: 5 completed, 0 failed"} {
		if !strings.Contains(resumed.String(), want) {
			t.Errorf("resumed submit's output lacks %q:\n%s", want, resumed.String())
		}
	}
	got := p.requestsRecorded(t, sessions...)
	for _, s := range sessions {
		if got[s] != 1 {
			t.Errorf("session %s: %d requests recorded, want 1", s, got[s])
		}
	}
	code, stdout, _ := p.corral(t, "batch", "results", file)
	if code != 0 || strings.Count(stdout, `"status":"completed"`) != 5 || strings.Count(stdout, `: released"`) != 2 {
		t.Errorf("results: exit %d:\n%s", code, stdout)
	}
}

// Two submits of one file at once start each job once: the second finds
// the sessions, or the requests queued already, or its requests are
// recorded once.
func TestBatchConcurrentSubmitsStartOnce(t *testing.T) {
	p := startDev(t, echoPrompt, nil)
	var lines []string
	var sessions []uuid.UUID
	for i := range 6 {
		lines = append(lines, fmt.Sprintf(`{"id": "j%d", "prompt": "p%d"}`, i, i))
		s, _ := jobSession("default", todaysBatch(), fmt.Sprintf("j%d", i))
		sessions = append(sessions, s)
	}
	file := writeJobs(t, lines...)
	codes := make(chan int, 2)
	for range 2 {
		go func() {
			code, _, stderr := p.corral(t, "batch", "submit", file)
			if code != 0 {
				t.Errorf("exit %d: %s", code, stderr)
			}
			codes <- code
		}()
	}
	<-codes
	<-codes
	got := p.requestsRecorded(t, sessions...)
	for _, s := range sessions {
		if got[s] != 1 {
			t.Errorf("session %s: %d requests recorded, want 1", s, got[s])
		}
	}
	if n := len(p.model.Requests()); n != len(sessions) {
		t.Errorf("the model was asked %d times, want %d", n, len(sessions))
	}
}

// A batch's name scopes its job IDs: the same file submitted under another
// name (tomorrow's run of a nightly file) runs its jobs again instead of
// returning the last run's answers, and status and results read the
// batch they are named.
func TestBatchNamesScopeJobIDs(t *testing.T) {
	p := startDev(t, echoPrompt, nil)
	file := writeJobs(t, `{"id": "fix-1", "prompt": "alpha"}`)
	for _, night := range []string{"nightly-1", "nightly-2"} {
		code, _, stderr := p.corral(t, "batch", "submit", "--batch", night, file)
		if code != 0 || !strings.Contains(stderr, "batch "+night+": 1 jobs: 1 submitted now, 0 before") {
			t.Fatalf("submit --batch %s: exit %d, stderr:\n%s", night, code, stderr)
		}
	}
	if n := len(p.model.Requests()); n != 2 {
		t.Errorf("the model was asked %d times, want once a night", n)
	}
	one, _ := jobSession("default", "nightly-1", "fix-1")
	two, _ := jobSession("default", "nightly-2", "fix-1")
	for _, night := range []struct {
		name    string
		session uuid.UUID
	}{{"nightly-1", one}, {"nightly-2", two}} {
		code, stdout, stderr := p.corral(t, "batch", "results", "--batch", night.name, file)
		if code != 0 {
			t.Fatalf("results --batch %s: exit %d: %s", night.name, code, stderr)
		}
		var res jobResult
		if err := json.Unmarshal([]byte(stdout), &res); err != nil {
			t.Fatalf("results --batch %s: %v: %q", night.name, err, stdout)
		}
		if res.Batch != night.name || res.Session != night.session || res.Status != statusCompleted {
			t.Errorf("results --batch %s = %+v, want the job of that batch, completed", night.name, res)
		}
	}
	// Today's default names neither.
	code, stdout, _ := p.corral(t, "batch", "status", file)
	if code != 0 || stdout != "batch "+todaysBatch()+": 1 jobs: 0 pending, 0 running, 0 completed, 0 failed, 1 not_submitted\n" {
		t.Errorf("status under today's default: exit %d, %q", code, stdout)
	}
	for _, bad := range []string{" ", "a\nb", strings.Repeat("x", maxBatchName+1)} {
		if code, _, stderr := p.corral(t, "batch", "status", "--batch", bad, file); code != 2 {
			t.Errorf("status --batch %q: exit %d (%s), want 2", bad, code, stderr)
		}
	}
}
