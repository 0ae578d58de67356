package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"corral.dev/pkg/event"
	"corral.dev/pkg/model"
	"corral.dev/pkg/policy"
	"corral.dev/pkg/sessionlog"
	"corral.dev/schemas"
)

// batchNamespace is the UUID namespace of batch jobs' session IDs. A job's
// session and request IDs are derived from its tenant, its batch's name and
// its ID (UUIDv5, not the usual v7), so that submitting a file again under
// the same batch finds the sessions it started instead of starting new
// ones, and a job ID used again in another batch (tomorrow's run of a
// nightly file) starts a session of its own.
//
// These IDs are no secret: anyone who knows a batch's name and its jobs'
// ids can work them out. That is safe because neither is a message ID of
// the requests' stream, whose duplicate window spans every tenant's
// subjects: the session names a subject under the job's tenant and user,
// which only they may publish on, and the request is recorded once per
// session by its ID. The request is published with no message ID, only
// if the job's subject holds none already ([bus.PublishFirst]). Nor can
// another request, started first in the job's session, pass for the
// job's: the job is in conflict ([startedOtherwise]).
var batchNamespace = uuid.MustParse("5c1b8f0e-3d2a-4f6b-9a7e-0c4d2e8b1f63")

// maxJobID is the longest job ID, in bytes.
const maxJobID = 256

// job is one line of a batch file.
type job struct {
	line    int
	id      string
	tenant  string
	session uuid.UUID
	// req is the request that starts the job's session; the harness
	// records it once by its ID.
	req event.Request
	// dir is the folder or archive the job's workspace starts from,
	// uploaded when the job is submitted; "" for none.
	dir string
}

// jobLine is what a line of a batch file may hold.
type jobLine struct {
	ID     string `json:"id"`
	Prompt string `json:"prompt"`
	Model  string `json:"model"`
	Tenant string `json:"tenant"`
	User   string `json:"user"`
	// Dir is relative to the batch file's directory.
	Dir string `json:"dir"`
	// Repo is a repository the job's workspace starts as a checkout of,
	// and Environment the environment its session runs in.
	Repo        *event.Repo `json:"repo"`
	Environment string      `json:"environment"`
}

// jobDefaults fill what a line leaves out; batch is the batch's name.
type jobDefaults struct{ tenant, user, model, batch string }

// jobSession returns the session and request IDs of job id of batch in
// tenant. Neither a tenant nor a batch's name holds a newline, so the
// three cannot run into each other.
func jobSession(tenant, batch, id string) (session, request uuid.UUID) {
	session = uuid.NewSHA1(batchNamespace, []byte(tenant+"\n"+batch+"\n"+id))
	return session, uuid.NewSHA1(session, []byte("request"))
}

// maxBatchName is the longest batch name, in bytes.
const maxBatchName = 128

// defaultBatch is the name of file's batch when none is given: the file's
// name, without its extension, and the day (UTC), so that a file submitted
// again the same day goes on with its jobs, and the next day starts them
// afresh.
func defaultBatch(file string, now time.Time) string {
	base := filepath.Base(file)
	return strings.TrimSuffix(base, filepath.Ext(base)) + "-" + now.UTC().Format(time.DateOnly)
}

// checkBatchName says why name cannot name a batch.
func checkBatchName(name string) error {
	switch {
	case strings.TrimSpace(name) == "":
		return errors.New("--batch: a batch needs a name")
	case len(name) > maxBatchName:
		return fmt.Errorf("--batch: %d bytes; the limit is %d", len(name), maxBatchName)
	case !utf8.ValidString(name) || strings.ContainsFunc(name, unicode.IsControl):
		return fmt.Errorf("--batch %q: a name is printable text on one line", name)
	}
	return nil
}

// readJobsFile reads a batch file; see [readJobs].
func readJobsFile(path string, d jobDefaults) ([]*job, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &exitError{2, err}
	}
	defer f.Close()
	jobs, err := readJobs(f, d)
	if err != nil {
		return nil, &exitError{2, fmt.Errorf("%s: %w", path, err)}
	}
	for _, j := range jobs {
		if j.dir != "" && !filepath.IsAbs(j.dir) {
			j.dir = filepath.Join(filepath.Dir(path), j.dir)
		}
	}
	return jobs, nil
}

// maxLineErrors is how many bad lines a refusal lists.
const maxLineErrors = 20

// readJobs reads a batch file: one JSON object a line, with an id and a
// prompt, and optionally a model, tenant, user and dir; blank lines are
// skipped. Each job's request is checked against the request schema. A
// file with any bad line, or two lines with one id, is refused whole, with
// the line number of each problem.
func readJobs(r io.Reader, d jobDefaults) ([]*job, error) {
	br := bufio.NewReader(r)
	var jobs []*job
	var problems []string
	seen := make(map[string]int)
	for n := 1; ; n++ {
		raw, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(raw)) > 0 {
			j, perr := parseJob(n, raw, d)
			switch {
			case perr != nil:
				problems = append(problems, fmt.Sprintf("line %d: %v", n, perr))
			case seen[j.id] != 0:
				problems = append(problems, fmt.Sprintf("line %d: id %q repeats line %d", n, j.id, seen[j.id]))
			default:
				seen[j.id] = n
				jobs = append(jobs, j)
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if len(problems) > 0 {
		if len(problems) > maxLineErrors {
			problems = append(problems[:maxLineErrors], fmt.Sprintf("and %d more", len(problems)-maxLineErrors))
		}
		return nil, fmt.Errorf("nothing submitted:\n  %s", strings.Join(problems, "\n  "))
	}
	if len(jobs) == 0 {
		return nil, errors.New("no jobs in the file")
	}
	return jobs, nil
}

func parseJob(n int, raw []byte, d jobDefaults) (*job, error) {
	var l jobLine
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		var syn *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &syn):
			return nil, fmt.Errorf("not JSON: %v", err)
		case errors.Is(err, io.ErrUnexpectedEOF):
			return nil, errors.New("not JSON: it ends too soon")
		case errors.As(err, &typ) && typ.Field != "":
			return nil, fmt.Errorf("%s: got %s, want %s", typ.Field, typ.Value, typ.Type)
		case errors.As(err, &typ):
			return nil, fmt.Errorf("got %s, want an object", typ.Value)
		}
		return nil, errors.New(strings.TrimPrefix(err.Error(), "json: "))
	}
	if dec.More() {
		return nil, errors.New("more than one JSON value")
	}
	switch {
	case strings.TrimSpace(l.ID) == "":
		return nil, errors.New("id: missing")
	case len(l.ID) > maxJobID:
		return nil, fmt.Errorf("id: %d bytes; the limit is %d", len(l.ID), maxJobID)
	case strings.TrimSpace(l.Prompt) == "":
		return nil, fmt.Errorf("job %q: prompt: missing", l.ID)
	}
	j := &job{line: n, id: l.ID, tenant: cmp.Or(l.Tenant, d.tenant), dir: l.Dir}
	if err := event.CheckTenant(j.tenant); err != nil {
		return nil, fmt.Errorf("job %q: tenant: %v", l.ID, err)
	}
	var reqID uuid.UUID
	j.session, reqID = jobSession(j.tenant, d.batch, j.id)
	j.req = event.Request{
		Header:      event.NewHeader(event.TypeRequest, j.tenant, j.session),
		User:        cmp.Or(l.User, d.user),
		Model:       cmp.Or(l.Model, d.model),
		Prompt:      l.Prompt,
		Repo:        l.Repo,
		Environment: l.Environment,
	}
	if l.Repo != nil && l.Dir != "" {
		return nil, fmt.Errorf("job %q: a workspace starts from one of repo and dir, not both", l.ID)
	}
	j.req.ID = reqID
	data, err := json.Marshal(&j.req)
	if err != nil {
		return nil, err
	}
	if err := schemas.Validate(event.TypeRequest, data); err != nil {
		return nil, fmt.Errorf("job %q: %v", l.ID, err)
	}
	return j, nil
}

// Job statuses.
const (
	statusNotSubmitted = "not_submitted"
	statusPending      = "pending"
	statusRunning      = "running"
	statusCompleted    = "completed"
	statusFailed       = "failed"
	statusStopped      = "stopped"
	// statusPaused is a job whose session is paused over a budget: it
	// waits for a reviewer's raise, and goes on by itself after one.
	statusPaused = "paused"
	// statusConflict is a job whose session another request started:
	// another user's, or one that is not the job's. The job did not run,
	// and nothing that session did is the job's.
	statusConflict = "conflict"
)

// jobState is a job as its session's log tells it.
type jobState struct {
	// sess has folded the session's log as far as it was read.
	sess   *sessionlog.Session
	status string
	// first is the request that started the job's session, as the
	// session recorded it: the job's own, or else the job is in conflict.
	first   *event.SessionRequested
	answer  string
	code    string
	reason  string
	usage   model.Usage
	turns   int
	costUSD float64
	// changes is what the job's session changed in a workspace started
	// from a repository or a dir.
	changes *event.Changes
}

// ended reports whether the job's session has come to an end, or to a
// pause over a budget: following it waits for no one's raise.
func (s *jobState) ended() bool {
	switch s.status {
	case statusCompleted, statusFailed, statusStopped, statusPaused, statusConflict:
		return true
	}
	return false
}

// apply folds one event of the job's session, accepted by its Log, into
// its state. A session started by a request that is not the job's is in
// conflict, and nothing of it after, or before, counts as the job's: not
// its answer, turns, cost or changes.
func (s *jobState) apply(j *job, ev event.Event, prices *policy.Policy) {
	if s.status == statusConflict {
		return
	}
	switch ev := ev.(type) {
	case *event.SessionRequested:
		if s.first == nil {
			s.first = ev
			if what := startedOtherwise(j, ev); what != "" {
				*s = jobState{sess: s.sess, first: ev, status: statusConflict,
					reason: fmt.Sprintf("session %s was started by user %q with %s: the job did not run", j.session, ev.User, what)}
				return
			}
		}
		s.status = statusRunning
	case *event.ModelResponded:
		s.turns++
		s.usage.Add(ev.Usage)
		s.costUSD += prices.Cost(ev.Model, ev.Usage)
	case *event.ContextCompacted:
		// A summary's call costs as a turn does, but is none.
		s.usage.Add(ev.Usage)
		if ev.Model != "" {
			s.costUSD += prices.Cost(ev.Model, ev.Usage)
		}
	case *event.SessionCompleted:
		s.status, s.answer, s.code, s.reason = statusCompleted, ev.Answer, "", ""
		s.changes = ev.Changes
	case *event.SessionFailed:
		s.status, s.code, s.reason = statusFailed, ev.Code, ev.Reason
	case *event.SessionStopped:
		s.status, s.code, s.reason = statusStopped, "", "stopped by "+ev.By+prefixed(": ", ev.Reason)
	case *event.SessionPaused:
		s.status, s.code, s.reason = statusPaused, event.CodeBudget, ev.Reason+"; to go on: "+ev.Resume
	case *event.SessionResumed:
		s.status, s.code, s.reason = statusRunning, "", ""
	}
}

// startedOtherwise says how first, the request that started job j's
// session, is not the job's, or "" if it is. The job's request is the one
// of the ID worked out for it, for its user, with its prompt (and model,
// if it names one). The job's user, not whoever sends it, is the
// submitter: a bot's credential submits on the user's subject, and the
// session is the user's. The IDs are no secret, so the ID alone proves
// nothing: another user of the tenant may start the session first, as
// themselves, with a request of their own or of the job's ID, and a bot
// of the tenant may start it as the job's user with another prompt.
func startedOtherwise(j *job, first *event.SessionRequested) string {
	switch {
	case first.Request != j.req.ID, first.User != j.req.User:
		return "another request"
	case first.Prompt != j.req.Prompt:
		return "another request (a different prompt)"
	case j.req.Model != "" && first.Model != j.req.Model:
		return "another request (model " + first.Model + ")"
	case (first.Repo == nil) != (j.req.Repo == nil) || first.Repo != nil && *first.Repo != *j.req.Repo:
		return "another request (another repository)"
	case (first.Files != "") != (j.dir != "") || j.req.Files != "" && first.Files != j.req.Files:
		return "another request (other files)"
	case j.req.Environment != "" && first.Environment != j.req.Environment:
		return "another request (environment " + first.Environment + ")"
	case first.Fork != uuid.Nil, len(first.Vaults) > 0, !first.SessionConfig.IsZero():
		return "another request (a fork, vaults or a configuration a job has none of)"
	}
	return ""
}

// resubmitted says how the job differs from the request that started its
// session, when that request was the job's ID for the job's user with
// another prompt or model: the same id submitted before from another
// version of the file, which the file, not the platform, must settle.
func (s *jobState) resubmitted(j *job) string {
	r := s.first
	switch {
	case r == nil, r.Request != j.req.ID, r.User != j.req.User:
		return ""
	case r.Prompt != j.req.Prompt:
		return "a different prompt"
	case j.req.Model != "" && r.Model != j.req.Model:
		return "model " + r.Model
	}
	return ""
}

// jobReader reads jobs' states from the platform.
type jobReader struct {
	js     jetstream.JetStream
	logs   *sessionlog.Log
	prices *policy.Policy
}

func newJobReader(_ context.Context, js jetstream.JetStream, logs *sessionlog.Log, prices *policy.Policy) (*jobReader, error) {
	return &jobReader{js: js, logs: logs, prices: prices}, nil
}

// read returns the state of every job, in order, reading several sessions'
// logs at a time.
func (r *jobReader) read(ctx context.Context, jobs []*job) ([]*jobState, error) {
	out := make([]*jobState, len(jobs))
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i, j := range jobs {
		g.Go(func() error {
			st, err := r.readOne(ctx, j)
			out[i] = st
			return err
		})
	}
	return out, g.Wait()
}

func (r *jobReader) readOne(ctx context.Context, j *job) (*jobState, error) {
	entries, sess, err := r.logs.ReadAll(ctx, j.tenant, j.session)
	if err != nil {
		return nil, fmt.Errorf("job %q: %w", j.id, err)
	}
	st := &jobState{sess: sess, status: statusNotSubmitted}
	if len(entries) == 0 {
		// Not in the log yet: never submitted, or its request waits for
		// the harness (a client may not read the requests' queue).
		// Submitting it again is safe: a request still queued is not
		// published again, and the harness records a request once.
		return st, nil
	}
	for _, en := range entries {
		st.apply(j, en.Event, r.prices)
	}
	if st.status == statusNotSubmitted {
		// Events but no request: the harness refused it, or the session
		// holds only what others recorded so far.
		st.status = statusPending
	}
	return st, nil
}
