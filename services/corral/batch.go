package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"al.essio.dev/pkg/shellescape"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/model"
	"corral.dev/pkg/policy"
	"corral.dev/pkg/sessionlog"
	"corral.dev/pkg/workspaceapi"
)

func (e *env) batchCmd() *cobra.Command {
	var o batchOpts
	cmd := &cobra.Command{
		Use:   "batch",
		Short: "Run a file of jobs, one session each, and collect their results",
		Long: `A batch file holds one job a line, as JSON: an "id" and a "prompt", and
optionally "model", "tenant" and "user" (the flags give the defaults), and
"dir", a folder or a .tar, .tar.gz, .tgz or .zip archive (relative to the
batch file's directory) uploaded for the job's /workspace to start from, or
"repo", a git repository to start it as a checkout of (as corral run
--repo), and "environment", the tenant's environment to run in:

  {"id": "fix-1", "prompt": "make the tests in /workspace pass", "dir": "fix-1"}
  {"id": "fix-2", "prompt": "make the tests pass", "repo": {"url": "https://github.com/acme/app.git", "ref": "main"}, "environment": "py"}
  {"id": "sum-2", "prompt": "summarise /memories/notes.md", "model": "openai:gpt-4.1"}

Each job's session is named by its tenant, its id and the batch's name
(--batch; default: the file's name and today's date in UTC, as
jobs-2026-11-25 for jobs.jsonl): submitting the file again under the same
name (after an interruption, say) starts nothing twice and follows the jobs
still running, while the same ids under another name (tomorrow's run of a
nightly file) are new jobs. status and results read the sessions of the
file's jobs in the batch named: give them the --batch that submit printed
when it is not today's default.`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&o.nats, "nats", e.natsURL(), "NATS URL of the platform (CORRAL_NATS_URL)")
	pf.StringVar(&o.tenant, "tenant", cmp.Or(e.getenv("CORRAL_TENANT"), "default"), "tenant of jobs that name none (CORRAL_TENANT)")
	pf.StringVar(&o.user, "user", cmp.Or(e.getenv("CORRAL_USER"), e.getenv("USER"), "anonymous"), "user of jobs that name none (CORRAL_USER)")
	pf.StringVar(&o.batch, "batch", "", "the batch's name, which scopes its job IDs (default: FILE's name and today's date in UTC, as jobs-2026-11-25)")

	var noWait bool
	var modelName string
	submit := &cobra.Command{
		Use:   "submit FILE",
		Short: "Start a session for each job not yet started, and follow them until all end",
		Example: `  corral batch submit jobs.jsonl
  corral batch submit --no-wait --model openai:gpt-4.1 jobs.jsonl`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.model = modelName
			return e.batchSubmit(cmd.Context(), o, args[0], noWait)
		},
	}
	submit.Flags().BoolVar(&noWait, "no-wait", false, "submit and return without following the jobs")
	submit.Flags().StringVar(&modelName, "model", "", "model of jobs that name none (default the harness's CORRAL_MODEL)")

	var verbose, asJSON bool
	status := &cobra.Command{
		Use:   "status FILE",
		Short: "Count the file's jobs by status; --verbose lists each",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.batchStatus(cmd.Context(), o, args[0], verbose, asJSON)
		},
	}
	status.Flags().BoolVarP(&verbose, "verbose", "v", false, "a line per job")
	jsonFlag(status, &asJSON)

	var out, policyFile, diffs string
	results := &cobra.Command{
		Use:   "results FILE",
		Short: "Write one JSON line per job: its status, answer, cost and error",
		Long: `Writes one JSON line per job of FILE, in the file's order:

  {"id":"fix-1","batch":"jobs-2026-11-25","tenant":"default","session":"…","status":"completed","answer":"…",
   "turns":3,"usage":{"input_tokens":1200,"output_tokens":300},"cost_usd":0.0081}

status is completed, failed, stopped, paused (over a budget, waiting for a
reviewer's raise), conflict (its session was started by another request,
another user's or not the job's: the job did not run), running, pending
(waiting for the harness) or not_submitted; a failed, stopped or paused job
has "code" and "error" (a paused job's code is budget_exceeded, and its
error says what lets it go on), a job in conflict "error", saying who
started its session.
The cost prices each model response's tokens by the policy's price table, as
the harness does for budgets. A completed job whose workspace started from a
repository or a dir has "changes": the files it changed, with their lines;
--diffs DIR writes each such job's patch (corral workspace SESSION diff) to
DIR/<id>.patch, and names it in the line as "diff".`,
		Example: `  corral batch results jobs.jsonl --out results.jsonl
  corral batch results jobs.jsonl --out results.jsonl --diffs patches/`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.batchResults(cmd.Context(), o, args[0], out, policyFile, diffs)
		},
	}
	results.Flags().StringVar(&diffs, "diffs", "", "directory to write each changed job's patch to, as <id>.patch")
	results.Flags().StringVarP(&out, "out", "o", "-", "file to write (- for stdout)")
	results.Flags().StringVar(&policyFile, "policy", e.getenv("CORRAL_POLICY_FILE"), "policy file whose prices give the cost (CORRAL_POLICY_FILE; default the built-in deploy/policy.yaml)")

	cmd.AddCommand(submit, status, results)
	return cmd
}

type batchOpts struct {
	nats, tenant, user, model, batch string
}

// openBatch reads a batch file and connects to the platform. It names the
// batch in o when o names none.
func (e *env) openBatch(ctx context.Context, o *batchOpts, file string) ([]*job, jetstream.JetStream, func(), error) {
	if err := event.CheckTenant(o.tenant); err != nil {
		return nil, nil, nil, &exitError{2, err}
	}
	if o.batch == "" {
		o.batch = defaultBatch(file, time.Now())
	}
	if err := checkBatchName(o.batch); err != nil {
		return nil, nil, nil, usageError(err)
	}
	jobs, err := readJobsFile(file, jobDefaults{tenant: o.tenant, user: o.user, model: o.model, batch: o.batch})
	if err != nil {
		return nil, nil, nil, err
	}
	nc, js, err := e.connect(o.nats)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := checkPlatform(ctx, js, o.nats, o.tenant); err != nil {
		nc.Close()
		return nil, nil, nil, err
	}
	return jobs, js, nc.Close, nil
}

func (e *env) batchSubmit(ctx context.Context, o batchOpts, file string, noWait bool) error {
	jobs, js, closeConn, err := e.openBatch(ctx, &o, file)
	if err != nil {
		return err
	}
	defer closeConn()
	// Following starts after the last event of the jobs' tenants stored
	// before the jobs' states are read: whatever happens to a job after
	// its read is seen (stream sequences only grow).
	var last uint64
	looked := make(map[string]bool)
	for _, j := range jobs {
		if looked[j.tenant] {
			continue
		}
		looked[j.tenant] = true
		m, err := bus.LastBySubject(ctx, js, bus.StreamEvents, "events."+j.tenant+".>")
		if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			return err
		}
		last = max(last, m.StreamSeq)
	}
	from := last + 1
	r, err := newJobReader(ctx, js, e.sessionLog(js), policy.Default())
	if err != nil {
		return err
	}
	states, err := r.read(ctx, jobs)
	if err != nil {
		if ctx.Err() != nil {
			return interrupted(file, o.batch, "before submitting anything")
		}
		return err
	}
	var conflicts []string
	for i, j := range jobs {
		if c := states[i].resubmitted(j); c != "" {
			conflicts = append(conflicts, fmt.Sprintf("line %d: job %q was submitted before with %s (session %s); give this job an id of its own", j.line, j.id, c, j.session))
		}
	}
	if len(conflicts) > 0 {
		return &exitError{1, fmt.Errorf("%s: nothing submitted:\n  %s", file, strings.Join(conflicts, "\n  "))}
	}

	submitted, before := 0, 0
	// A job whose session another request started is not submitted: the
	// harness would refuse it, or take the other request for it.
	var taken []string
	// Each folder is uploaded once for each tenant and user whose jobs
	// start from it.
	uploaded := make(map[[3]string]string)
	for i, j := range jobs {
		if states[i].status == statusConflict {
			taken = append(taken, fmt.Sprintf("job %q: %s", j.id, states[i].reason))
			continue
		}
		if states[i].status != statusNotSubmitted {
			before++
			continue
		}
		if j.dir != "" {
			key := [3]string{j.dir, j.tenant, j.req.User}
			if uploaded[key] == "" {
				ref, err := e.uploadDir(ctx, js, j.tenant, j.req.User, j.dir)
				if err != nil {
					if ctx.Err() != nil {
						return interrupted(file, o.batch, fmt.Sprintf("with %d of %d jobs submitted", submitted+before, len(jobs)))
					}
					return fmt.Errorf("job %q: %w", j.id, err)
				}
				uploaded[key] = ref
			}
			j.req.Files = uploaded[key]
		}
		// Published only if the job's subject holds no request: one
		// submitted before that the harness has not taken yet is not
		// queued twice; and the harness ignores a request already in
		// the session's log after it. Not deduplicated by a message ID:
		// the job's IDs are worked out from its tenant, batch and id,
		// and a client of another tenant, or another user, could send a
		// message of that ID first, on a subject of its own, and the
		// stream would drop this one as its duplicate (see
		// [bus.PublishFirst]). The subject only this job's user (and
		// the tenant's bots) may publish on.
		j.req.Time = time.Now().UTC()
		fresh, err := bus.PublishFirst(ctx, js, bus.RequestSubject(j.tenant, j.session, j.req.User), &j.req)
		if err != nil {
			if ctx.Err() != nil {
				return interrupted(file, o.batch, fmt.Sprintf("with %d of %d jobs submitted", submitted+before, len(jobs)))
			}
			return fmt.Errorf("job %q: %w", j.id, err)
		}
		states[i].status = statusPending
		if fresh {
			submitted++
		} else {
			before++
		}
	}
	fmt.Fprintf(e.stderr, "%s: batch %s: %d jobs: %d submitted now, %d before", file, o.batch, len(jobs), submitted, before)
	if len(taken) > 0 {
		fmt.Fprintf(e.stderr, ", %d in conflict:\n  %s", len(taken), strings.Join(taken, "\n  "))
	}
	fmt.Fprintln(e.stderr)
	if noWait {
		fmt.Fprintf(e.stderr, "follow them with: corral batch status --batch %s %s\n", shellescape.Quote(o.batch), shellescape.Quote(file))
		if len(taken) > 0 {
			return &exitError{1, fmt.Errorf("%d of %d jobs in conflict did not run; give them ids of their own, or another --batch", len(taken), len(jobs))}
		}
		return nil
	}
	return e.followBatch(ctx, js, r.logs, r.prices, file, o.batch, jobs, states, from)
}

// interrupted is the error of a submit interrupted at when.
func interrupted(file, batch, when string) error {
	return &exitError{130, fmt.Errorf("interrupted %s; run corral batch submit --batch %s %s again to go on", when, shellescape.Quote(batch), shellescape.Quote(file))}
}

// followBatch follows the jobs' sessions until every one has ended,
// reporting each as it ends. Each event is judged by l and by its job's
// session as read so far.
func (e *env) followBatch(ctx context.Context, js jetstream.JetStream, l *sessionlog.Log, prices *policy.Policy, file, batch string, jobs []*job, states []*jobState, from uint64) error {
	// Keyed by tenant and session: a job's session ID alone could be
	// another tenant's session.
	bySession := make(map[string]int, len(jobs))
	tenants := make(map[string]bool)
	done := 0
	for i, j := range jobs {
		bySession[bus.SessionKey(j.tenant, j.session)] = i
		tenants[j.tenant] = true
		if states[i].ended() {
			done++
		}
	}
	rep := e.newBatchReport(len(jobs), done)
	defer rep.close()
	count := func() map[string]int {
		n := make(map[string]int)
		for _, st := range states {
			n[st.status]++
		}
		return n
	}
	if done < len(jobs) {
		// events.<tenant>.<session>.session.<name>.<writer>, one filter,
		// which a credential's permissions name: a credential has one
		// tenant, and only an operator's may follow several at once.
		tenant := "*"
		if len(tenants) == 1 {
			for t := range tenants {
				tenant = t
			}
		}
		cons, err := js.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{
			FilterSubjects:    []string{fmt.Sprintf("events.%s.*.session.*.*", tenant)},
			DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
			OptStartSeq:       from,
			InactiveThreshold: 5 * time.Second,
		})
		if err != nil {
			return fmt.Errorf("follow the batch: %w", err)
		}
		it, err := cons.Messages(jetstream.PullHeartbeat(bus.PullHeartbeat))
		if err != nil {
			return fmt.Errorf("follow the batch: %w", err)
		}
		defer it.Stop()
		stop := context.AfterFunc(ctx, it.Stop)
		defer stop()
		for done < len(jobs) {
			msg, err := it.Next()
			if err != nil {
				if ctx.Err() != nil {
					rep.close()
					return interrupted(file, batch, fmt.Sprintf("with %d of %d jobs finished", done, len(jobs)))
				}
				return fmt.Errorf("follow the batch: %w", err)
			}
			// The tenant's other sessions are none of the batch's: passed
			// over by their subject, unread.
			a, err := sessionlog.ParseSubject(msg.Subject())
			if err != nil {
				continue
			}
			i, ok := bySession[bus.SessionKey(a.Tenant, a.Session)]
			if !ok || states[i].ended() {
				continue
			}
			if _, err := msg.Metadata(); err != nil {
				return fmt.Errorf("follow the batch: %w", err)
			}
			m := bus.FromDelivery(msg)
			en, err := l.Judge(ctx, m)
			if errors.Is(err, sessionlog.ErrRejected) {
				continue
			}
			if err != nil {
				return fmt.Errorf("job %q: %w", jobs[i].id, err)
			}
			if l.Admit(ctx, states[i].sess, en, m.Data) != nil {
				continue
			}
			states[i].apply(jobs[i], en.Event, prices)
			if states[i].ended() {
				done++
				rep.ended(jobs[i], states[i], done, count())
			}
		}
	}
	n := count()
	rep.close()
	fmt.Fprintf(e.stderr, "%s: %s\n", file, summary(len(jobs), n))
	if bad := n[statusFailed] + n[statusStopped] + n[statusPaused] + n[statusConflict]; bad > 0 {
		return &exitError{1, fmt.Errorf("%d of %d jobs did not complete; corral batch results --batch %s %s says why", bad, len(jobs), shellescape.Quote(batch), shellescape.Quote(file))}
	}
	return nil
}

// summary counts jobs by status, those that ended first.
func summary(total int, n map[string]int) string {
	s := fmt.Sprintf("%d jobs: %d completed, %d failed", total, n[statusCompleted], n[statusFailed])
	for _, k := range []string{statusStopped, statusPaused, statusConflict, statusRunning, statusPending, statusNotSubmitted} {
		if n[k] > 0 {
			s += fmt.Sprintf(", %d %s", n[k], k)
		}
	}
	return s
}

// batchReport shows a batch's progress: a bar on a terminal, a line per
// finished job elsewhere.
type batchReport struct {
	w      io.Writer
	total  int
	bar    *progressbar.ProgressBar
	closed bool
}

func (e *env) newBatchReport(total, done int) *batchReport {
	r := &batchReport{w: e.stderr, total: total}
	if f, ok := e.stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		r.bar = progressbar.NewOptions(total,
			progressbar.OptionSetWriter(f),
			progressbar.OptionSetDescription("jobs"),
			progressbar.OptionShowCount(),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionSetPredictTime(false),
			progressbar.OptionFullWidth(),
		)
		_ = r.bar.Set(done)
		return r
	}
	fmt.Fprintf(r.w, "[%d/%d] finished\n", done, total)
	return r
}

// ended reports that job j ended, the done'th of the batch.
func (r *batchReport) ended(j *job, st *jobState, done int, n map[string]int) {
	line := fmt.Sprintf("%s: %s", j.id, st.status)
	if st.code != "" {
		line += " (" + st.code + ")"
	}
	line += prefixed(": ", oneLine(st.reason, 200))
	if r.bar == nil {
		fmt.Fprintf(r.w, "[%d/%d] %s\n", done, r.total, line)
		return
	}
	if st.status != statusCompleted {
		// A failure stays on screen above the bar.
		_ = r.bar.Clear()
		fmt.Fprintln(r.w, line)
	}
	if bad := n[statusFailed] + n[statusStopped] + n[statusConflict]; bad > 0 {
		r.bar.Describe(fmt.Sprintf("jobs (%d failed)", bad))
	}
	_ = r.bar.Set(done)
}

func (r *batchReport) close() {
	if r.bar != nil && !r.closed {
		_ = r.bar.Exit()
		fmt.Fprintln(r.w)
	}
	r.closed = true
}

// jobStatusJSON is a line of batch status --json: one job's.
type jobStatusJSON struct {
	ID      string    `json:"id"`
	Batch   string    `json:"batch"`
	Tenant  string    `json:"tenant"`
	Session uuid.UUID `json:"session"`
	Status  string    `json:"status"`
	Code    string    `json:"code,omitempty"`
	Error   string    `json:"error,omitempty"`
}

func (e *env) batchStatus(ctx context.Context, o batchOpts, file string, verbose, asJSON bool) error {
	jobs, js, closeConn, err := e.openBatch(ctx, &o, file)
	if err != nil {
		return err
	}
	defer closeConn()
	r, err := newJobReader(ctx, js, e.sessionLog(js), policy.Default())
	if err != nil {
		return err
	}
	states, err := r.read(ctx, jobs)
	if err != nil {
		return err
	}
	if asJSON {
		out := make([]jobStatusJSON, len(jobs))
		for i, j := range jobs {
			st := states[i]
			out[i] = jobStatusJSON{ID: j.id, Batch: o.batch, Tenant: j.tenant, Session: j.session, Status: st.status, Code: st.code, Error: st.reason}
		}
		return writeJSONLines(e.stdout, out...)
	}
	n := make(map[string]int)
	for _, st := range states {
		n[st.status]++
	}
	fmt.Fprintf(e.stdout, "batch %s: %d jobs: %d pending, %d running, %d completed, %d failed", o.batch, len(jobs),
		n[statusPending], n[statusRunning], n[statusCompleted], n[statusFailed])
	for _, k := range []string{statusPaused, statusStopped, statusConflict, statusNotSubmitted} {
		if n[k] > 0 {
			fmt.Fprintf(e.stdout, ", %d %s", n[k], k)
		}
	}
	fmt.Fprintln(e.stdout)
	if !verbose {
		return nil
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tSESSION\tSTATUS\tDETAIL")
	for i, j := range jobs {
		st := states[i]
		detail := oneLine(st.answer, 80)
		if st.reason != "" {
			detail = oneLine(st.reason, 120)
			if st.code != "" {
				detail = st.code + ": " + detail
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", j.id, j.session, st.status, detail)
	}
	return w.Flush()
}

// jobResult is a line of `corral batch results`.
type jobResult struct {
	ID      string      `json:"id"`
	Batch   string      `json:"batch"`
	Tenant  string      `json:"tenant"`
	Session uuid.UUID   `json:"session"`
	Status  string      `json:"status"`
	Answer  string      `json:"answer,omitempty"`
	Turns   int         `json:"turns"`
	Usage   model.Usage `json:"usage"`
	CostUSD float64     `json:"cost_usd"`
	Code    string      `json:"code,omitempty"`
	Error   string      `json:"error,omitempty"`
	// Changes and Diff: see the results command's help.
	Changes *event.Changes `json:"changes,omitempty"`
	Diff    string         `json:"diff,omitempty"`
}

func (e *env) batchResults(ctx context.Context, o batchOpts, file, out, policyFile, diffs string) error {
	prices := policy.Default()
	if policyFile != "" {
		var err error
		if prices, err = policy.Load(policyFile); err != nil {
			return &exitError{2, err}
		}
	}
	jobs, js, closeConn, err := e.openBatch(ctx, &o, file)
	if err != nil {
		return err
	}
	defer closeConn()
	r, err := newJobReader(ctx, js, e.sessionLog(js), prices)
	if err != nil {
		return err
	}
	states, err := r.read(ctx, jobs)
	if err != nil {
		return err
	}
	if diffs != "" {
		if err := os.MkdirAll(diffs, 0o755); err != nil {
			return err
		}
	}
	lines := make([]jobResult, 0, len(jobs))
	for i, j := range jobs {
		st := states[i]
		res := jobResult{
			ID: j.id, Batch: o.batch, Tenant: j.tenant, Session: j.session, Status: st.status, Answer: st.answer,
			Turns: st.turns, Usage: st.usage, CostUSD: st.costUSD, Code: st.code, Error: st.reason,
			Changes: st.changes,
		}
		if diffs != "" && st.changes != nil {
			if res.Diff, err = e.writeJobDiff(ctx, js, o, j, diffs); err != nil {
				return fmt.Errorf("job %q: %w", j.id, err)
			}
		}
		lines = append(lines, res)
	}
	if out == "-" || out == "" {
		return writeJSONLines(e.stdout, lines...)
	}
	var b bytes.Buffer
	if err := writeJSONLines(&b, lines...); err != nil {
		return err
	}
	return writeFileAtomic(out, b.Bytes(), 0o644)
}

// writeJobDiff writes the patch of job j's session to dir, named for the
// job, and returns the file's path.
func (e *env) writeJobDiff(ctx context.Context, js jetstream.JetStream, o batchOpts, j *job, dir string) (string, error) {
	ws := &wsClient{nc: js.Conn(), o: &wsOpts{memOpts: memOpts{tenant: j.tenant, user: j.req.User}}, session: j.session}
	var r workspaceapi.DiffRequest
	r.Session = j.session
	var reply workspaceapi.DiffReply
	if err := ws.call(ctx, workspaceapi.OpDiff, r, &reply); err != nil {
		return "", err
	}
	path := filepath.Join(dir, patchName(j.id))
	if err := writeFileAtomic(path, []byte(reply.Patch), 0o644); err != nil {
		return "", err
	}
	if reply.Truncated {
		fmt.Fprintf(e.stderr, "corral: job %q: the patch was cut at %d bytes (corral workspace %s get --all has every file)\n", j.id, len(reply.Patch), j.session)
	}
	return path, nil
}

// patchName is the file a job's patch is written to: its id, with what
// may not stand in a file name replaced, and a hash of the id when
// anything was (an upper-case letter too), so that two ids never share a
// file.
func patchName(id string) string {
	safe := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, id)
	// Lower case too, so that ids differing only in case never share a
	// file on a file system that ignores case.
	if safe != strings.ToLower(id) || strings.HasPrefix(safe, ".") {
		sum := sha256.Sum256([]byte(id))
		safe = strings.TrimLeft(safe, ".") + "-" + hex.EncodeToString(sum[:4])
	}
	return safe + ".patch"
}

// writeFileAtomic writes data to path, with permissions perm, through a
// temporary file beside it, so that an interrupted write leaves the old
// file whole and a reader never sees part of it.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	merr := f.Chmod(perm)
	cerr := f.Close()
	if err := errors.Join(werr, merr, cerr); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return err
	}
	return nil
}
