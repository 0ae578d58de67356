package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"corral.dev/pkg/event"
	"corral.dev/pkg/sessionlog"
)

func (e *env) logsCmd() *cobra.Command {
	var url, tenant string
	var followFlag, asJSON bool
	cmd := &cobra.Command{
		Use:   "logs [flags] SESSION",
		Short: "Show a session's full event log; -f follows it until the session ends",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			session, err := uuid.Parse(args[0])
			if err != nil {
				return &exitError{2, fmt.Errorf("session %q is not a session ID", args[0])}
			}
			if err := event.CheckTenant(tenant); err != nil {
				return &exitError{2, err}
			}
			return e.logs(cmd.Context(), url, tenant, session, followFlag, asJSON)
		},
	}
	cmd.Flags().StringVar(&url, "nats", e.natsURL(), "NATS URL of the platform (CORRAL_NATS_URL)")
	cmd.Flags().StringVar(&tenant, "tenant", cmp.Or(e.getenv("CORRAL_TENANT"), "default"), "the session's tenant (CORRAL_TENANT)")
	cmd.Flags().BoolVarP(&followFlag, "follow", "f", false, "keep printing new events until the session completes or fails")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print events as JSON lines")
	return cmd
}

func (e *env) logs(ctx context.Context, url, tenant string, session uuid.UUID, followFlag, asJSON bool) error {
	nc, js, err := e.connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := checkPlatform(ctx, js, url, tenant); err != nil {
		return err
	}
	print := func(en sessionlog.Entry) {
		if asJSON {
			fmt.Fprintf(e.stdout, "%s\n", eventJSON(en))
			return
		}
		fmt.Fprintln(e.stdout, describe(en.Event))
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
	// Until the session ends: a completion or failure that is the last
	// event so far (a follow-up may continue a session after one).
	return follow(ctx, js, l, sess, last.Seq, func(en sessionlog.Entry, pending uint64) (bool, error) {
		print(en)
		return endsRequest(en.Event) && pending == 0, nil
	})
}

// endsRequest reports whether ev ends a session's request: a completion, a
// failure or a stop.
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
	case *event.ToolDispatched:
		body = fmt.Sprintf("call=%s %s %s", ev.Call, ev.Name, oneLine(ev.Summary, 200))
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
	case *event.ApprovalRequested:
		body = fmt.Sprintf("call=%s %s rule=%s input=%s", ev.Call, ev.Tool, ev.Rule, oneLine(string(ev.Input), 200))
	case *event.ApprovalDecided:
		body = fmt.Sprintf("call=%s approved=%t reviewer=%s reason=%q", ev.Call, ev.Approved, ev.Reviewer, ev.Reason)
	default:
		raw, _ := json.Marshal(ev)
		body = string(raw)
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
