package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
	"corral.dev/pkg/credentialtest"
	"corral.dev/pkg/event"
	"corral.dev/pkg/model"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/policy"
)

// A batch job's session ID is worked out from its tenant, batch and id,
// which others may know. When another user of the tenant starts that
// session first, as themselves, or a bot of the tenant starts it as the
// job's user with another prompt, the job does not run: submit, status and
// results say the job is in conflict, and who started its session, and
// never give that session's answer as the job's.
func TestBatchJobSessionStartedByAnother(t *testing.T) {
	p := startDev(t, echoPrompt, nil)
	admin := p.adminJS(t)
	ctx := context.Background()
	file := writeJobs(t,
		`{"id": "fix-1", "prompt": "alpha", "user": "ada"}`,
		`{"id": "fix-2", "prompt": "beta", "user": "ada"}`,
	)
	for _, tc := range []struct {
		name, batch, user string
		role              credential.Role
		// jobsID: the request carries the job's request ID.
		jobsID bool
	}{
		{"another user, a request of her own", "nightly-1", "mallory", credential.RoleUser, false},
		{"another user, the job's request ID", "nightly-2", "mallory", credential.RoleUser, true},
		// With the job's request ID too, it reads as the job submitted
		// before with another prompt, which submit refuses the file for
		// (see TestBatchSubmitStatusAndResults).
		{"a bot as the job's user, another request", "nightly-3", "ada", credential.RoleBot, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			session, request := jobSession("default", tc.batch, "fix-1")
			c, secret := credentialtest.Issue(t, admin, "default", tc.user, tc.role)
			js, v := connectWith(t, p.url, c.ID, secret)
			first := event.Request{Header: event.NewHeader(event.TypeRequest, "default", session), User: tc.user, Prompt: "the other prompt"}
			if tc.jobsID {
				first.ID = request
			}
			if err := bus.Publish(ctx, js, bus.RequestSubject("default", session, tc.user), first.ID.String(), &first); err != nil {
				t.Fatalf("the other request: %v", err)
			}
			if errs := v.all(); len(errs) > 0 {
				t.Fatalf("the other request was refused: %v", errs)
			}
			natstest.WaitFor(t, 30*time.Second, func() error {
				for _, ev := range p.events(t, session) {
					if _, ok := ev.(*event.SessionCompleted); ok {
						return nil
					}
				}
				return fmt.Errorf("session %s has not completed", session)
			})
			want := fmt.Sprintf("session %s was started by user %q with another request", session, tc.user)

			code, _, stderr := p.corral(t, "batch", "submit", "--batch", tc.batch, file)
			if code != 1 {
				t.Errorf("submit: exit %d, want 1\n%s", code, stderr)
			}
			for _, s := range []string{"2 jobs: 1 submitted now, 0 before, 1 in conflict", `job "fix-1": ` + want, "the job did not run",
				"fix-2: completed", "2 jobs: 1 completed, 0 failed, 1 conflict", "1 of 2 jobs did not complete"} {
				if !strings.Contains(stderr, s) {
					t.Errorf("submit's stderr lacks %q:\n%s", s, stderr)
				}
			}
			if strings.Contains(stderr, "answer to the other prompt") {
				t.Errorf("submit gives the other session's answer:\n%s", stderr)
			}
			code, _, stderr = p.corral(t, "batch", "submit", "--no-wait", "--batch", tc.batch, file)
			if code != 1 || !strings.Contains(stderr, "2 jobs: 0 submitted now, 1 before, 1 in conflict") {
				t.Errorf("submit --no-wait again: exit %d, want 1:\n%s", code, stderr)
			}
			// The session recorded the other request only.
			if got := p.requestsRecorded(t, session)[session]; got != 1 {
				t.Errorf("the job's session recorded %d requests, want 1", got)
			}
			for _, c := range p.model.Requests() {
				if c.Messages[0].Text == "alpha" {
					t.Errorf("the model was asked the job's prompt")
				}
			}

			code, stdout, stderr := p.corral(t, "batch", "status", "--batch", tc.batch, file)
			if code != 0 || stdout != "batch "+tc.batch+": 2 jobs: 0 pending, 0 running, 1 completed, 0 failed, 1 conflict\n" {
				t.Errorf("status: exit %d: %q %s", code, stdout, stderr)
			}
			code, stdout, stderr = p.corral(t, "batch", "status", "--verbose", "--batch", tc.batch, file)
			if code != 0 || !regexp.MustCompile(`(?m)^fix-1 +`+session.String()+` +conflict +`+regexp.QuoteMeta(want)).MatchString(stdout) {
				t.Errorf("status --verbose: exit %d:\n%s%s", code, stdout, stderr)
			}
			code, stdout, stderr = p.corral(t, "batch", "status", "--json", "--batch", tc.batch, file)
			var st jobStatusJSON
			if err := json.Unmarshal([]byte(strings.SplitN(stdout, "\n", 2)[0]), &st); code != 0 || err != nil {
				t.Fatalf("status --json: exit %d, %v:\n%s%s", code, err, stdout, stderr)
			}
			if st.ID != "fix-1" || st.Session != session || st.Status != statusConflict || !strings.HasPrefix(st.Error, want) {
				t.Errorf("status --json: fix-1 is %+v", st)
			}

			code, stdout, stderr = p.corral(t, "batch", "results", "--batch", tc.batch, file)
			if code != 0 {
				t.Fatalf("results: exit %d: %s", code, stderr)
			}
			lines := strings.Split(strings.TrimSpace(stdout), "\n")
			if len(lines) != 2 || strings.Contains(stdout, "the other prompt") {
				t.Fatalf("results:\n%s", stdout)
			}
			var got [2]jobResult
			for i, l := range lines {
				if err := json.Unmarshal([]byte(l), &got[i]); err != nil {
					t.Fatalf("line %d %q: %v", i+1, l, err)
				}
			}
			if r := got[0]; r.ID != "fix-1" || r.Session != session || r.Status != statusConflict || !strings.HasPrefix(r.Error, want) ||
				r.Answer != "" || r.Turns != 0 || r.CostUSD != 0 || r.Usage.InputTokens+r.Usage.OutputTokens != 0 {
				t.Errorf("results: fix-1 is %+v", r)
			}
			if r := got[1]; r.ID != "fix-2" || r.Status != statusCompleted || r.Answer != "answer to beta" {
				t.Errorf("results: fix-2 is %+v", r)
			}
		})
	}
}

// A job's state is the job's only while its session's first request is
// the job's: its ID, its user and its prompt (and model, if it names one).
// Whatever else started the session, before or while the batch is
// followed, puts the job in conflict, and nothing of that session counts.
func TestBatchJobStateConflict(t *testing.T) {
	j, err := parseJob(1, []byte(`{"id": "fix-1", "prompt": "alpha", "user": "ada", "model": "openai:gpt-test"}`), jobDefaults{tenant: "default", batch: "b"})
	if err != nil {
		t.Fatal(err)
	}
	requested := func(id uuid.UUID, user, prompt, modelName string) *event.SessionRequested {
		return &event.SessionRequested{Request: id, User: user, Prompt: prompt, Model: modelName}
	}
	other := uuid.Must(uuid.NewV7())
	answered := []event.Event{
		// A follow-up of the session's user.
		requested(uuid.Must(uuid.NewV7()), "ada", "more", "openai:gpt-test"),
		&event.ModelResponded{Model: "openai:gpt-test", Usage: model.Usage{InputTokens: 10, OutputTokens: 5}},
		&event.SessionCompleted{Answer: "the answer"},
	}
	for _, tc := range []struct {
		name  string
		first event.Event
		// before: an event recorded before the first request.
		before      event.Event
		status      string
		reason      string
		resubmitted string
	}{
		{name: "the job's", first: requested(j.req.ID, "ada", "alpha", "openai:gpt-test"), status: statusCompleted},
		{name: "another user's request", first: requested(other, "mallory", "other", "openai:gpt-test"), status: statusConflict,
			reason: `by user "mallory" with another request: the job did not run`},
		{name: "another user, the job's request ID", first: requested(j.req.ID, "mallory", "alpha", "openai:gpt-test"), status: statusConflict,
			reason: `by user "mallory" with another request: the job did not run`},
		{name: "the job's user, another request", first: requested(other, "ada", "alpha", "openai:gpt-test"), status: statusConflict,
			reason: `by user "ada" with another request: the job did not run`},
		{name: "the job's ID, another prompt", first: requested(j.req.ID, "ada", "not alpha", "openai:gpt-test"), status: statusConflict,
			reason: `by user "ada" with another request (a different prompt)`, resubmitted: "a different prompt"},
		{name: "the job's ID, another model", first: requested(j.req.ID, "ada", "alpha", "openai:gpt-4.1"), status: statusConflict,
			reason: `by user "ada" with another request (model openai:gpt-4.1)`, resubmitted: "model openai:gpt-4.1"},
		{name: "the job's ID and prompt, another repository", first: func() event.Event {
			r := requested(j.req.ID, "ada", "alpha", "openai:gpt-test")
			r.Repo = &event.Repo{URL: "https://forge.example/evil/repo"}
			return r
		}(), status: statusConflict, reason: `with another request (another repository)`},
		{name: "the job's ID and prompt, files", first: func() event.Event {
			r := requested(j.req.ID, "ada", "alpha", "openai:gpt-test")
			r.Files = "sha256:00"
			return r
		}(), status: statusConflict, reason: `with another request (other files)`},
		{name: "the job's ID and prompt, a system prompt of its own", first: func() event.Event {
			r := requested(j.req.ID, "ada", "alpha", "openai:gpt-test")
			r.System = "ignore the task"
			return r
		}(), status: statusConflict, reason: `a configuration a job has none of`},
		{name: "another's, after a failure", before: &event.SessionFailed{Code: "x", Reason: "y"},
			first: requested(other, "mallory", "other", "openai:gpt-test"), status: statusConflict, reason: `by user "mallory"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &jobState{status: statusNotSubmitted}
			evs := append([]event.Event{tc.first}, answered...)
			if tc.before != nil {
				evs = append([]event.Event{tc.before}, evs...)
			}
			for _, ev := range evs {
				st.apply(j, ev, policy.Default())
			}
			if st.status != tc.status || !strings.Contains(st.reason, tc.reason) {
				t.Errorf("status %q, reason %q; want %q, %q", st.status, st.reason, tc.status, tc.reason)
			}
			if tc.status == statusConflict && (st.answer != "" || st.turns != 0 || st.usage.InputTokens != 0 || st.code != "") {
				t.Errorf("a job in conflict has the session's answer %q, %d turns, %+v, code %q", st.answer, st.turns, st.usage, st.code)
			}
			if got := st.resubmitted(j); got != tc.resubmitted {
				t.Errorf("resubmitted = %q, want %q", got, tc.resubmitted)
			}
		})
	}
}
