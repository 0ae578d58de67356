package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"corral.dev/pkg/callview"
	"corral.dev/pkg/event"
	"corral.dev/pkg/sessionlog"
)

func (e *env) logsCmd() *cobra.Command {
	var url string
	var tenant sessionTenant
	var followFlag, asJSON bool
	cmd := &cobra.Command{
		Use:   "logs [flags] SESSION",
		Short: "Show a session's full event log; -f follows it until the session ends",
		Long: `Shows a session's full event log; -f follows it until the session ends.
SESSION is its ID or the first 4 or more of its hex digits.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := parseIDPrefix("session", args[0]); err != nil {
				return err
			}
			return e.logs(cmd.Context(), url, tenant.chosen(cmd), args[0], followFlag, asJSON)
		},
	}
	cmd.Flags().StringVar(&url, "nats", e.natsURL(), "NATS URL of the platform (CORRAL_NATS_URL)")
	e.sessionTenantFlag(cmd, &tenant)
	cmd.Flags().BoolVarP(&followFlag, "follow", "f", false, "keep printing new events until the session completes, fails or is stopped (through a pause over a budget, until a raise lets it go on)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print events as JSON lines")
	return cmd
}

// logs shows the log of the session arg names, of tenant chosen (""
// for the one it is found in).
func (e *env) logs(ctx context.Context, url, chosen, arg string, followFlag, asJSON bool) error {
	nc, js, err := e.connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	tenant, session, err := findSession(ctx, js, arg, chosen)
	if err != nil {
		return err
	}
	if err := checkPlatform(ctx, js, url, tenant); err != nil {
		return err
	}
	// Followed, the session's output as it comes too, heard from before
	// its log is read, and shown once what the log holds is.
	var view *liveView
	if followFlag && !asJSON {
		view = newLiveView(e.stdout)
		view.hold()
		stop, err := view.subscribe(nc, tenant, session)
		if err != nil {
			return err
		}
		defer stop()
	}
	print := func(en sessionlog.Entry) {
		switch {
		case asJSON:
			fmt.Fprintf(e.stdout, "%s\n", eventJSON(en))
		case view != nil:
			showLogged(view, en.Event)
		default:
			// A call's summary is the model's: shown, never acted on.
			fmt.Fprintln(e.stdout, printable(describe(en.Event)))
		}
	}
	l := e.sessionLog(js)
	entries, sess, err := l.ReadAll(ctx, tenant, session)
	if err != nil {
		return err
	}
	if len(entries) == 0 {
		return fmt.Errorf("no events for session %s in tenant %s", session, tenant)
	}
	for _, en := range entries {
		print(en)
	}
	last := entries[len(entries)-1]
	if !followFlag || endsRequest(last.Event) {
		return nil
	}
	if view != nil {
		view.release()
	}
	// Until the session ends: a completion or failure that is the last
	// event so far (a follow-up may continue a session after one).
	return follow(ctx, js, l, sess, last.Seq, func(en sessionlog.Entry, pending uint64) (bool, error) {
		print(en)
		return endsRequest(en.Event) && pending == 0, nil
	})
}

// showLogged shows ev's log line through v, which shows the session's
// output as it comes between them: a call's output between its dispatch
// and its result, the model's text until its response is recorded.
func showLogged(v *liveView, ev event.Event) {
	switch ev := ev.(type) {
	case *event.ModelResponded:
		v.responded(ev.Turn)
		v.line(describe(ev))
		for _, d := range ev.Dispatches() {
			v.callDispatched(d.Call)
		}
	case *event.ToolDispatched:
		v.line(describe(ev))
		v.callDispatched(ev.Call)
	case *event.ToolCompleted:
		v.callCompleted(ev.Call, ev.Output)
		v.line(describe(ev))
	default:
		v.line(describe(ev))
	}
}

// endsRequest reports whether ev ends a session's request: a completion, a
// failure or a stop. A pause over a budget does not: the session goes on
// where it was once a reviewer raises the budget.
func endsRequest(ev event.Event) bool {
	switch ev.(type) {
	case *event.SessionCompleted, *event.SessionFailed, *event.SessionStopped:
		return true
	}
	return false
}

// describe renders one event as a readable log line.
func describe(ev any) string {
	e, ok := ev.(event.Event)
	if !ok {
		return fmt.Sprintf("%v", ev)
	}
	h := e.Head()
	var body string
	switch ev := ev.(type) {
	case *event.SessionRequested:
		body = fmt.Sprintf("user=%s model=%s prompt=%q", ev.User, ev.Model, oneLine(ev.Prompt, 200))
	case *event.ModelResponded:
		names := make([]string, len(ev.Calls))
		for i, c := range ev.Calls {
			names[i] = c.Name
		}
		body = fmt.Sprintf("turn=%d tokens=%d/%d stop=%s calls=[%s] text=%q", ev.Turn, ev.Usage.InputTokens,
			ev.Usage.OutputTokens, ev.StopReason, strings.Join(names, " "), oneLine(textOf(ev), 200))
		if ev.Refusal != "" {
			body += fmt.Sprintf(" refusal=%q", oneLine(ev.Refusal, 200))
		}
	case *event.ToolDispatched:
		body = fmt.Sprintf("call=%s %s %s", ev.Call, ev.Name, oneLine(callview.Unescaped(ev.Summary), 200))
	case *event.ToolCompleted:
		body = fmt.Sprintf("call=%s %s error=%t %dms output=%q", ev.Call, ev.Name, ev.IsError, ev.DurationMS, oneLine(ev.Output, 200))
	case *event.SessionCompleted:
		body = fmt.Sprintf("turns=%d tokens=%d/%d answer=%q", ev.Turns, ev.Usage.InputTokens, ev.Usage.OutputTokens, oneLine(ev.Answer, 400))
	case *event.SessionFailed:
		body = fmt.Sprintf("code=%s reason=%q", ev.Code, ev.Reason)
		if ev.Budget != "" {
			body += " budget=" + ev.Budget
		}
	case *event.SessionStopped:
		body = fmt.Sprintf("by=%s reason=%q", ev.By, ev.Reason)
	case *event.SessionPaused:
		u := ev.Usage
		body = fmt.Sprintf("budget=%s reason=%q steps=%d tokens=%d/%d cost_usd=%.4f sandbox_seconds=%.1f wall_time=%s resume=%q",
			ev.Budget, ev.Reason, u.Steps, u.InputTokens, u.OutputTokens, u.CostUSD, u.SandboxSeconds, u.WallTime, ev.Resume)
	case *event.SessionResumed:
		body = fmt.Sprintf("raise=%s reviewer=%s", ev.Raise, ev.Reviewer)
	case *event.ApprovalRequested:
		body = fmt.Sprintf("call=%s %s rule=%s input=%s", ev.Call, ev.Tool, ev.Rule, oneLine(callview.Plain(ev.Input), 200))
	case *event.ApprovalDecided:
		body = fmt.Sprintf("call=%s approved=%t reviewer=%s reason=%q", ev.Call, ev.Approved, ev.Reviewer, ev.Reason)
	case *event.ContextCompacted:
		body = fmt.Sprintf("turn=%d cleared_through=%d summarized_through=%d tokens=%d->%d summary=%q", ev.Turn, ev.ClearedThrough,
			ev.SummarizedThrough, ev.TokensBefore, ev.TokensAfter, oneLine(ev.Summary, 200))
	default:
		raw, _ := json.Marshal(ev)
		body = callview.Plain(raw)
	}
	line := fmt.Sprintf("%s %-26s %s", h.Time.Format("2006-01-02 15:04:05.000"), event.Kind(h.Type), body)
	if r, ok := ev.(*event.ModelResponded); ok {
		// Then each call it dispatched, as a tool.dispatched would show.
		for _, d := range r.Dispatches() {
			line += "\n" + describe(d)
		}
	}
	return line
}
