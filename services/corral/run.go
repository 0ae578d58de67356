package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/callview"
	"corral.dev/pkg/event"
	"corral.dev/pkg/sessionlog"
)

func (e *env) runCmd() *cobra.Command {
	var o runOpts
	cmd := &cobra.Command{
		Use:   "run [flags] PROMPT",
		Short: "Start a session, show its progress on stderr and print its answer on stdout",
		Long: `Start a session, show its progress on stderr and print its answer on stdout.
PROMPT "-" reads the prompt from standard input.`,
		Example: `  corral run "fix the failing test"
  git diff | corral run -`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.prompt = args[0]
			if o.prompt == "-" {
				var err error
				if o.prompt, err = readPrompt(cmd.InOrStdin()); err != nil {
					return err
				}
			}
			// Named by neither, the tenant of --session or --fork is
			// the session's.
			o.findTenant = !cmd.Flags().Changed("tenant") && e.getenv("CORRAL_TENANT") == ""
			if err := o.checkIDs(); err != nil {
				return err
			}
			return e.run(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.nats, "nats", e.natsURL(), "NATS URL of the platform (CORRAL_NATS_URL)")
	f.StringVar(&o.model, "model", "", "model as openai:<model> or anthropic:<model> (default the harness's CORRAL_MODEL)")
	f.StringVar(&o.tenant, "tenant", cmp.Or(e.getenv("CORRAL_TENANT"), "default"), "tenant (CORRAL_TENANT)")
	f.StringVar(&o.user, "user", cmp.Or(e.getenv("CORRAL_USER"), e.getenv("USER"), "anonymous"), "user (CORRAL_USER)")
	f.BoolVar(&o.json, "json", false, "print the session's events as JSON lines on stdout instead")
	f.StringVar(&o.session, "session", "", "send PROMPT to this session, which goes on from where it is, instead of starting one")
	f.StringVar(&o.fork, "fork", "", "start a new session whose /workspace is this session's, as of its last snapshot (the conversation starts afresh)")
	f.StringVar(&o.repo, "repo", "", "start the session's /workspace as a checkout of this git repository (an http or https URL, no credentials in it: a vault binding its host gives egress the token to add)")
	f.StringVar(&o.ref, "ref", "", "--repo: the branch, tag or full commit ID to check out (default: the repository's default branch)")
	f.IntVar(&o.depth, "depth", 0, "--repo: commits of history to fetch (default 1, a shallow clone; -1: all)")
	f.StringVar(&o.environment, "environment", "", "run the session in this environment of the tenant (corral environments ls; default: the tenant's default environment)")
	f.StringVar(&o.dir, "dir", "", "start the session's /workspace as this folder's files, or a .tar, .tar.gz, .tgz or .zip archive's (modes and symlinks kept; at most 200,000 entries and 50 GiB; a file uploaded in the last 6 days is not sent again)")
	return cmd
}

// maxPrompt is the most of a prompt corral run reads from standard input.
const maxPrompt = 1 << 20

// readPrompt reads corral run's prompt from r, which must hold one of at
// most maxPrompt bytes; trailing white space is dropped.
func readPrompt(r io.Reader) (string, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxPrompt+1))
	switch {
	case err != nil:
		return "", fmt.Errorf("read the prompt from standard input: %w", err)
	case len(b) > maxPrompt:
		return "", usageError(fmt.Errorf("the prompt on standard input is over %d bytes", maxPrompt))
	case !utf8.Valid(b):
		return "", usageError(errors.New("the prompt on standard input is not UTF-8 text"))
	}
	prompt := strings.TrimRightFunc(string(b), unicode.IsSpace)
	if strings.TrimSpace(prompt) == "" {
		return "", usageError(errors.New("PROMPT is - but standard input is empty"))
	}
	return prompt, nil
}

// acceptWait is how long `corral run --session` waits for the harness to
// take its request.
const acceptWait = 30 * time.Second

type runOpts struct {
	nats, model, tenant, user, prompt, session, fork string
	repo, ref, environment                           string
	depth                                            int
	json                                             bool
	// findTenant says the tenant was not chosen: --session's or --fork's
	// is the one the session is found in.
	findTenant bool
	// dir is a folder or archive to upload for the workspace to start
	// from.
	dir string
}

func (e *env) run(ctx context.Context, o runOpts) error {
	if err := event.CheckTenant(o.tenant); err != nil {
		return &exitError{2, err}
	}
	nc, js, err := e.connect(o.nats)
	if err != nil {
		return err
	}
	defer nc.Close()
	session, fork, err := o.findSessions(ctx, js)
	if err != nil {
		return err
	}
	if err := checkPlatform(ctx, js, o.nats, o.tenant); err != nil {
		return err
	}
	req := event.Request{
		Header: event.NewHeader(event.TypeRequest, o.tenant, session),
		User:   o.user,
		Model:  o.model,
		Prompt: o.prompt,
	}
	req.Fork = fork
	if err := o.startFrom(&req); err != nil {
		return err
	}
	if o.dir != "" {
		if o.session != "" || o.fork != "" || o.repo != "" {
			return &exitError{2, errors.New("--dir starts a new session from uploaded files: it cannot go with --session, --fork or --repo")}
		}
		if req.Files, err = e.uploadDir(ctx, js, o.tenant, o.user, o.dir); err != nil {
			return err
		}
	}
	l := e.sessionLog(js)
	// The request's ID doubles as its message ID: a retried publish is
	// dropped as a duplicate, so it starts one session, not two.
	var before uint64 // the last event of a continued session before this request
	sess := sessionlog.NewSession(o.tenant, session)
	if o.session != "" {
		entries, read, err := l.ReadAll(ctx, o.tenant, session)
		if err != nil {
			return err
		}
		if len(entries) == 0 {
			return &exitError{1, fmt.Errorf("no session %s in tenant %s", session, o.tenant)}
		}
		before, sess = entries[len(entries)-1].Seq, read
	}
	// The session's output as it comes, heard from before the request
	// goes (its first piece may follow at once), and shown once the
	// session's first event is: the log's consumer, made after the
	// request goes, may start after the model's first pieces came.
	view := newLiveView(e.stderr)
	if !o.json {
		view.hold()
		stop, err := view.subscribe(nc, o.tenant, session)
		if err != nil {
			return err
		}
		defer stop()
	}
	if err := bus.Publish(ctx, js, bus.RequestSubject(o.tenant, session, o.user), req.ID.String(), &req); err != nil {
		return err
	}
	if !o.json {
		fmt.Fprintf(e.stderr, "session %s\n", session)
	}
	released := o.json
	// liveAnswer is the text of the last response without calls, if it
	// was shown as it streamed.
	var liveAnswer string
	var failed *event.SessionFailed
	var stopped *event.SessionStopped
	var paused *event.SessionPaused
	// A continued session's log holds earlier requests: what matters
	// starts at this one's, or at a failure recorded after it was sent (a
	// follow-up naming an unknown model, say). A follow-up the harness
	// refused outright leaves nothing in the log: give up waiting then.
	ours := o.session == ""
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	giveUp := time.AfterFunc(acceptWait, func() {
		cancel(fmt.Errorf("the platform did not take the request within %s (the DEADLETTER stream says why)", acceptWait))
	})
	defer giveUp.Stop()
	if ours {
		giveUp.Stop()
	}
	// A continued session is followed from its last event read: what
	// matters comes after it.
	err = follow(fctx, js, l, sess, before, func(en sessionlog.Entry, _ uint64) (bool, error) {
		ev := en.Event
		if !ours {
			switch e := ev.(type) {
			case *event.SessionRequested:
				ours = e.Request == req.ID
			case *event.SessionFailed:
				ours = en.Seq > before
			}
			if !ours {
				return false, nil
			}
			giveUp.Stop()
		}
		if o.json {
			fmt.Fprintf(e.stdout, "%s\n", eventJSON(en))
		} else if shown := showProgress(view, ev); isResponse(ev) {
			liveAnswer = shown
		}
		if !released {
			// From here on, the live subject and the log come in the
			// order the server sent them (see liveView).
			view.release()
			released = true
		}
		switch ev := ev.(type) {
		case *event.SessionCompleted:
			if !o.json {
				// Shown whole as it streamed, on the terminal that
				// would show it again.
				if liveAnswer == "" || strings.TrimSpace(liveAnswer) != strings.TrimSpace(ev.Answer) || !oneTerminal(e.stdout, e.stderr) {
					answer := ev.Answer
					if isTerminal(e.stdout) {
						// The model's text, shown as text alone, as it
						// streamed; piped on as it is.
						answer = printable(answer)
					}
					fmt.Fprintln(e.stdout, answer)
				}
				if ev.Changes != nil {
					view.line(fmt.Sprintf("· changed in /workspace (corral workspace %s diff shows the patch):", session))
					writeChanges(e.stderr, ev.Changes)
				}
			}
			return true, nil
		case *event.SessionFailed:
			failed = ev
			return true, nil
		case *event.SessionStopped:
			stopped = ev
			return true, nil
		case *event.SessionPaused:
			// It waits for a reviewer's raise, which may be long in
			// coming: the requester learns what to ask for.
			paused = ev
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		if cause := context.Cause(fctx); cause != nil && ctx.Err() == nil {
			return &exitError{1, cause}
		}
		if ctx.Err() != nil {
			return &exitError{130, detached(session, o.tenant)}
		}
		return err
	}
	if failed != nil {
		return &exitError{1, fmt.Errorf("session %s failed (%s): %s", session, failed.Code, failed.Reason)}
	}
	if stopped != nil {
		return &exitError{1, fmt.Errorf("session %s was stopped by %s%s", session, stopped.By, prefixed(": ", stopped.Reason))}
	}
	if paused != nil {
		return &exitError{1, pausedError(session, paused)}
	}
	return nil
}

// pausedError tells the requester of a session paused over a budget which
// budget, and what lets it go on.
func pausedError(session uuid.UUID, p *event.SessionPaused) error {
	then := ""
	if strings.HasPrefix(p.Resume, "corral raise") {
		then = fmt.Sprintf("\nonce a reviewer approves the raise (corral approvals), the session goes on by itself: corral logs -f %s follows it", session)
	}
	return fmt.Errorf("session %s is paused over its budget %s: %s\nit keeps its workspace and goes on where it was; to go on:\n  %s%s",
		session, p.Budget, p.Reason, p.Resume, then)
}

// detached says, to someone who interrupted corral run, that the session
// goes on without it, and how to follow, stop or find it.
func detached(session uuid.UUID, tenant string) error {
	t := ""
	if tenant != "default" {
		t = " --tenant " + tenant
	}
	return fmt.Errorf("interrupted; session %s goes on without you:\n  corral logs%s -f %s   # follow it\n  corral stop%s %s      # stop it\n  corral sessions%s       # list the sessions", session, t, session, t, session, t)
}

// startFrom puts in req what the session's workspace starts from and its
// environment, as the flags name them: only a new session's.
func (o *runOpts) startFrom(req *event.Request) error {
	if o.repo == "" && (o.ref != "" || o.depth != 0) {
		return &exitError{2, errors.New("--ref and --depth go with --repo")}
	}
	if o.session != "" && (o.repo != "" || o.environment != "") {
		return &exitError{2, errors.New("--repo and --environment name what a new session starts from: they cannot go with --session")}
	}
	if o.repo != "" {
		if o.fork != "" {
			return &exitError{2, errors.New("a session starts from one of --fork and --repo, not both")}
		}
		req.Repo = &event.Repo{URL: o.repo, Ref: o.ref, Depth: o.depth}
	}
	req.Environment = o.environment
	return nil
}

// showProgress shows progress(ev) through v, and with it what v showed of
// ev live: after the model's text shown as it streamed, the rest of a
// response's text instead of its line; a call's output between its
// dispatch and its result. It returns the text of a response without
// calls, the session's answer, when it was shown as it streamed.
func showProgress(v *liveView, ev any) string {
	switch ev := ev.(type) {
	case *event.ModelResponded:
		text := textOf(ev)
		shown := v.responded(ev.Turn)
		switch {
		case shown != "":
			v.rest(shown, text)
		case strings.TrimSpace(text) != "" && len(ev.Calls) > 0:
			v.line(fmt.Sprintf("%s%s", modelPrefix, oneLine(strings.TrimSpace(text), 120)))
		}
		if note := stopNote(ev); note != "" {
			v.line(note)
		}
		for _, d := range ev.Dispatches() {
			v.line(progress(d))
			v.callDispatched(d.Call)
		}
		if shown != "" && len(ev.Calls) == 0 {
			return text
		}
	case *event.ToolDispatched:
		v.line(progress(ev))
		v.callDispatched(ev.Call)
	case *event.ToolCompleted:
		v.callCompleted(ev.Call, ev.Output)
		v.line(progress(ev))
	default:
		if line := progress(ev); line != "" {
			v.line(line)
		}
	}
	return ""
}

// progress is an account of an event for a person watching: a line, or a
// line for each call a model response dispatched (and its text before).
func progress(ev any) string {
	switch ev := ev.(type) {
	case *event.SessionRequested:
		return fmt.Sprintf("· request from %s to %s", ev.User, ev.Model)
	case *event.ModelResponded:
		// Then each call it dispatched, as a tool.dispatched would show.
		var lines []string
		if t := strings.TrimSpace(textOf(ev)); t != "" && len(ev.Calls) > 0 {
			lines = append(lines, fmt.Sprintf("· model: %s", oneLine(t, 120)))
		}
		if note := stopNote(ev); note != "" {
			lines = append(lines, note)
		}
		for _, d := range ev.Dispatches() {
			lines = append(lines, progress(d))
		}
		return strings.Join(lines, "\n")
	case *event.ToolDispatched:
		return fmt.Sprintf("→ %s %s %s", ev.Name, callTag(ev.Call), oneLine(callview.Unescaped(ev.Summary), 120))
	case *event.ToolCompleted:
		mark := ""
		if ev.IsError {
			mark = "error: "
		}
		return fmt.Sprintf("← %s %s %s%s", ev.Name, callTag(ev.Call), mark, oneLine(ev.Output, 120))
	case *event.SessionFailed:
		return fmt.Sprintf("✗ %s: %s", ev.Code, ev.Reason)
	case *event.SessionStopped:
		return fmt.Sprintf("■ stopped by %s%s", ev.By, prefixed(": ", ev.Reason))
	case *event.SessionPaused:
		return fmt.Sprintf("⏸ paused over its budget %s: %s", ev.Budget, ev.Reason)
	case *event.SessionResumed:
		return fmt.Sprintf("▶ resumed: %s approved raise %s", ev.Reviewer, ev.Raise)
	case *event.ContextCompacted:
		how := "older results cleared"
		if ev.SummarizedThrough > 0 {
			how += fmt.Sprintf(", turns up to %d summarised", ev.SummarizedThrough)
		}
		return fmt.Sprintf("⋯ conversation compacted to fit the context window (%s): about %d tokens, then %d", how, ev.TokensBefore, ev.TokensAfter)
	case *event.ApprovalRequested:
		return fmt.Sprintf("⏸ %s waits for a reviewer (rule %s): corral approve %s", ev.Tool, ev.Rule, ev.Call)
	case *event.ApprovalDecided:
		verdict := "denied"
		if ev.Approved {
			verdict = "approved"
		}
		return fmt.Sprintf("▶ %s by %s%s", verdict, ev.Reviewer, prefixed(": ", ev.Reason))
	}
	return ""
}

// callTag names a call in progress lines, so that the result of one of
// calls run side by side shows whose it is: the end of its ID, which is
// random (the start of a time-ordered one is shared by calls made at once).
func callTag(call uuid.UUID) string {
	s := call.String()
	return "[" + s[len(s)-6:] + "]"
}

func prefixed(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}

// stopNote says why the model stopped when that is news: it refused, it
// ran out of output tokens, or the provider's filter cut it; "" for a
// turn that ended as turns do.
func stopNote(ev *event.ModelResponded) string {
	switch {
	case ev.Refusal != "":
		return fmt.Sprintf("· the model refused: %s", oneLine(ev.Refusal, 200))
	case ev.StopReason == "max_tokens" || ev.StopReason == "length":
		return fmt.Sprintf("· the model stopped at its output limit (%s): CORRAL_MAX_TOKENS, in the harness's environment, raises it", ev.StopReason)
	case ev.StopReason == "content_filter":
		return "· the provider's content filter stopped the model's answer (content_filter)"
	}
	return ""
}

func textOf(ev *event.ModelResponded) string {
	var b strings.Builder
	for _, c := range ev.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
