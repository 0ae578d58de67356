package main

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"corral.dev/pkg/event"
	"corral.dev/pkg/sessionindex"
)

func (e *env) sessionsCmd() *cobra.Command {
	var url, tenant, user, statuses, since string
	var limit int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "sessions",
		Short: "List the tenant's sessions, the latest first: status, user, model, turns, cost, title",
		Long: `Lists the tenant's sessions from the session index, which the gateway keeps
from the session logs as they change: each session's user, status (running,
waiting for a reviewer, paused over a budget, completed, failed, stopped),
model, turns, cost (by the gateway's price table), when it started and when
its last event was, and a title from its first prompt. The latest first.

--json prints one JSON object a line, with these fields: tenant, session,
user, status, model, turns, cost_usd, input_tokens, output_tokens, started,
last_event, title, environment, code and reason (why it failed or stopped),
held (the calls waiting for a reviewer), requests and seq.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := event.CheckTenant(tenant); err != nil {
				return &exitError{2, err}
			}
			f := sessionindex.Filter{User: user, Limit: limit}
			if limit < 0 {
				return &exitError{2, fmt.Errorf("--limit %d: want 0 (all) or more", limit)}
			}
			for s := range strings.SplitSeq(statuses, ",") {
				if s = strings.TrimSpace(s); s == "" {
					continue
				}
				st, err := sessionindex.CheckStatus(s)
				if err != nil {
					return &exitError{2, fmt.Errorf("--status: %w", err)}
				}
				f.Statuses = append(f.Statuses, st)
			}
			if since != "" {
				t, err := sinceTime(since, time.Now())
				if err != nil {
					return &exitError{2, err}
				}
				f.Since = t
			}
			ctx := cmd.Context()
			nc, js, err := e.connect(url)
			if err != nil {
				return err
			}
			defer nc.Close()
			if err := checkPlatform(ctx, js, url, tenant); err != nil {
				return err
			}
			all, err := sessionindex.List(ctx, js, tenant)
			if errors.Is(err, sessionindex.ErrNoIndex) {
				return fmt.Errorf("%w: run corral setup as the admin, and the gateway", err)
			}
			if err != nil {
				return fmt.Errorf("sessions: %w", err)
			}
			listed := sessionindex.Select(all, f)
			if asJSON {
				// An index entry's fields are stable, and documented as
				// what this prints.
				return writeJSONLines(e.stdout, listed...)
			}
			if len(listed) == 0 {
				fmt.Fprintf(e.stderr, "No sessions of tenant %s%s.\n", tenant, prefixed(" for ", filterText(f)))
				return nil
			}
			w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "SESSION\tUSER\tSTATUS\tMODEL\tTURNS\tCOST USD\tSTARTED\tLAST EVENT\tTITLE")
			for _, s := range listed {
				// A title is the first line of a prompt, and user and model
				// are a request's: anyone's of the tenant, shown to whoever
				// lists its sessions, never acted on by their terminal.
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%.4f\t%s\t%s\t%s\n", s.Session, printable(oneLine(s.User, 24)), s.Status, printable(oneLine(s.Model, 60)), s.Turns, s.CostUSD,
					when(s.Started), when(s.LastEvent), printable(oneLine(s.Title, 60)))
			}
			return w.Flush()
		},
	}
	f := cmd.Flags()
	f.StringVar(&url, "nats", e.natsURL(), "NATS URL of the platform (CORRAL_NATS_URL)")
	f.StringVar(&tenant, "tenant", cmp.Or(e.getenv("CORRAL_TENANT"), "default"), "the tenant (CORRAL_TENANT)")
	f.StringVar(&user, "user", "", "only this user's sessions")
	f.StringVar(&statuses, "status", "", "only sessions of these statuses, comma separated: running, waiting, paused, completed, failed, stopped")
	f.StringVar(&since, "since", "", "only sessions with an event since then: a duration back from now (24h, 30m) or a time (2026-11-23, 2026-11-23T10:00:00Z)")
	f.IntVar(&limit, "limit", 50, "at most this many sessions, the latest (0: all)")
	jsonFlag(cmd, &asJSON)
	return cmd
}

// sinceTime reads --since: a duration back from now, or a date or time.
func sinceTime(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339Nano, time.DateTime, time.DateOnly} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("--since %q: want a duration (24h) or a time (2026-11-23, 2026-11-23T10:00:00Z)", s)
}

// when is a time as the list shows it, in UTC to the second.
func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05")
}

// filterText says what f keeps, for a list that came out empty.
func filterText(f sessionindex.Filter) string {
	var parts []string
	if f.User != "" {
		parts = append(parts, "user "+f.User)
	}
	for _, s := range f.Statuses {
		parts = append(parts, string(s))
	}
	if !f.Since.IsZero() {
		parts = append(parts, "since "+when(f.Since))
	}
	return strings.Join(parts, ", ")
}
