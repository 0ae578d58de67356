package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/policy"
	"corral.dev/services/approval"
	sandboxmanager "corral.dev/services/sandbox-manager"
)

func (e *env) approvalsCmd() *cobra.Command {
	var url, tenant string
	var all bool
	cmd := &cobra.Command{
		Use:   "approvals",
		Short: "List the tool calls waiting for a reviewer",
		Long: `Lists the calls the policy holds for a person's approval, newest first;
--all adds those decided. Decide one with corral approve ID or corral deny ID,
or on the reviewers' web page.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var resp approval.Response
			err := e.request(cmd.Context(), url, "approval service", approval.SubjectList, approval.ListRequest{Tenant: tenant, All: all}, &resp)
			if err != nil {
				return err
			}
			if len(resp.Approvals) == 0 {
				fmt.Fprintln(e.stdout, "Nothing is waiting for a decision.")
				return nil
			}
			w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tSTATUS\tTENANT\tUSER\tTOOL\tCALL\tRULE\tASKED")
			for _, a := range resp.Approvals {
				status := a.Status
				if a.Reviewer != "" {
					status += " by " + a.Reviewer
				}
				call := strings.Join(strings.Fields(string(a.Input)), " ")
				if len(call) > 60 {
					call = call[:59] + "…"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.ID, status, a.Tenant, a.User, a.Tool, call, a.Rule, a.RequestedAt.Local().Format(time.DateTime))
			}
			return w.Flush()
		},
	}
	cmd.Flags().StringVar(&url, "nats", e.natsURL(), "NATS URL of the platform (CORRAL_NATS_URL)")
	cmd.Flags().StringVar(&tenant, "tenant", "", "only this tenant's (default: every tenant's)")
	cmd.Flags().BoolVar(&all, "all", false, "list decided approvals too")
	cmd.AddCommand(e.keygenCmd())
	return cmd
}

func (e *env) decideCmd(approve bool) *cobra.Command {
	var url, token, reason, session string
	use, short := "approve ID", "Approve a held tool call: it runs"
	if !approve {
		use, short = "deny ID --reason R", "Deny a held tool call: the model gets the reason instead"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long: short + `.

The decision is made in the name of the reviewer whose token --token (or
CORRAL_REVIEWER_TOKEN) gives; with neither, the token corral dev made for its
reviewer is used, if there is one.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := uuid.Parse(args[0])
			if err != nil {
				return &exitError{2, fmt.Errorf("%q is not an approval ID (corral approvals lists them)", args[0])}
			}
			req := approval.DecideRequest{ID: id, Approve: approve, Reason: reason, Token: token}
			if session != "" {
				if req.Session, err = uuid.Parse(session); err != nil {
					return &exitError{2, fmt.Errorf("--session %q is not a session ID", session)}
				}
			}
			if !approve && strings.TrimSpace(reason) == "" {
				return &exitError{2, fmt.Errorf("say why with --reason: the model reads it")}
			}
			if req.Token == "" {
				req.Token = devReviewerToken()
			}
			if req.Token == "" {
				return &exitError{2, fmt.Errorf("a decision needs a reviewer's token: --token or CORRAL_REVIEWER_TOKEN")}
			}
			var resp approval.Response
			if err := e.request(cmd.Context(), url, "approval service", approval.SubjectDecide, req, &resp); err != nil {
				return err
			}
			a := resp.Approvals[0]
			fmt.Fprintf(e.stdout, "%s %s by %s: %s call of session %s\n", a.Status, a.ID, a.Reviewer, a.Tool, a.Session)
			return nil
		},
	}
	cmd.Flags().StringVar(&url, "nats", e.natsURL(), "NATS URL of the platform (CORRAL_NATS_URL)")
	cmd.Flags().StringVar(&token, "token", e.getenv("CORRAL_REVIEWER_TOKEN"), "your reviewer token (CORRAL_REVIEWER_TOKEN)")
	cmd.Flags().StringVar(&reason, "reason", "", "why; the model reads it when the call is denied")
	cmd.Flags().StringVar(&session, "session", "", "the approval's session, when its ID is in more than one")
	return cmd
}

// devReviewerToken is the token `corral dev` made for its reviewer in its
// default data directory, or "".
func devReviewerToken() string {
	dir, err := sandboxmanager.DefaultDataDir()
	if err != nil {
		return ""
	}
	b, err := os.ReadFile(filepath.Join(dir, "reviewer.token"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func (e *env) stopCmd() *cobra.Command {
	var url, by, reason string
	cmd := &cobra.Command{
		Use:   "stop SESSION",
		Short: "Stop a session: kill its running tool call and destroy its sandbox",
		Long: `Stops a session at once: the harness asks the model nothing more, the
running tool call is killed and the session's sandbox destroyed. A follow-up
request starts the session again, in a fresh sandbox.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			session, err := uuid.Parse(args[0])
			if err != nil {
				return &exitError{2, fmt.Errorf("%q is not a session ID", args[0])}
			}
			nc, js, err := e.connect(url)
			if err != nil {
				return err
			}
			defer nc.Close()
			return stopSession(cmd.Context(), js, session, by, reason, e)
		},
	}
	cmd.Flags().StringVar(&url, "nats", e.natsURL(), "NATS URL of the platform (CORRAL_NATS_URL)")
	cmd.Flags().StringVar(&by, "by", or(e.getenv("CORRAL_USER"), or(e.getenv("USER"), "anonymous")), "who stops it (CORRAL_USER)")
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the log")
	return cmd
}

// sessionEnd reads a session's log: its tenant, how it last ended
// ("completed", "failed", "stopped", or "" while it runs) and the sequence
// of its last event.
func sessionEnd(ctx context.Context, js jetstream.JetStream, session uuid.UUID) (tenant, ended string, last uint64, err error) {
	if err := checkPlatform(ctx, js, "the platform"); err != nil {
		return "", "", 0, err
	}
	msgs, err := bus.ReadAll(ctx, js, bus.StreamEvents, bus.SessionEvents("*", session))
	if err != nil {
		return "", "", 0, err
	}
	if len(msgs) == 0 {
		return "", "", 0, &exitError{1, fmt.Errorf("no session %s", session)}
	}
	for _, m := range msgs {
		ev, err := event.Parse(m.Data)
		if err != nil {
			continue
		}
		tenant = ev.(event.Event).Head().Tenant
		switch ev.(type) {
		case *event.SessionRequested:
			ended = ""
		case *event.SessionCompleted:
			ended = "completed"
		case *event.SessionFailed:
			ended = "failed"
		case *event.SessionStopped:
			ended = "stopped"
		}
	}
	return tenant, ended, msgs[len(msgs)-1].StreamSeq, nil
}

func stopSession(ctx context.Context, js jetstream.JetStream, session uuid.UUID, by, reason string, e *env) error {
	tenant, ended, last, err := sessionEnd(ctx, js, session)
	if err != nil {
		return err
	}
	if ended != "" {
		fmt.Fprintf(e.stdout, "session %s has %s already\n", session, ended)
		return nil
	}
	ev := event.SessionStopped{Header: event.NewHeader(event.TypeSessionStopped, tenant, session), By: by, Reason: reason}
	// One stop per stretch of the log: a retried stop is dropped, and a
	// session restarted by a follow-up can be stopped again.
	if err := bus.Record(ctx, js, &ev, fmt.Sprintf("%s:stopped:%d", session, last)); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "stopped session %s\n", session)
	return nil
}

func (e *env) raiseCmd() *cobra.Command {
	var url, by, reason string
	var l policy.Limits
	cmd := &cobra.Command{
		Use:   "raise SESSION --reason R [--steps N] [--tokens N] [--cost-usd X] [--sandbox-seconds X] [--wall-time D]",
		Short: "Ask a reviewer to raise a session's budget caps",
		Long: `Asks for new caps for a session, typically one stopped by its budget. The
request waits for a reviewer like a held call (corral approvals lists it);
once approved, continue the session with corral run --session SESSION.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			session, err := uuid.Parse(args[0])
			if err != nil {
				return &exitError{2, fmt.Errorf("%q is not a session ID", args[0])}
			}
			if l == (policy.Limits{}) {
				return &exitError{2, fmt.Errorf("name at least one cap to raise: --steps, --tokens, --cost-usd, --sandbox-seconds or --wall-time")}
			}
			if strings.TrimSpace(reason) == "" {
				return &exitError{2, fmt.Errorf("say why with --reason: the reviewer reads it")}
			}
			limits, err := json.Marshal(l)
			if err != nil {
				return err
			}
			if err := json.Unmarshal(limits, new(policy.Limits)); err != nil {
				return &exitError{2, err}
			}
			ctx := cmd.Context()
			nc, js, err := e.connect(url)
			if err != nil {
				return err
			}
			defer nc.Close()
			tenant, _, _, err := sessionEnd(ctx, js, session)
			if err != nil {
				return err
			}
			ev := event.BudgetRaise{
				Header: event.NewHeader(event.TypeBudgetRaise, tenant, session),
				Raise:  uuid.Must(uuid.NewV7()), User: by, Limits: limits, Reason: reason,
			}
			if err := bus.Record(ctx, js, &ev, ev.Raise.String()); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "asked a reviewer to raise session %s's caps to %s: approval %s\n", session, limits, ev.Raise)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&url, "nats", e.natsURL(), "NATS URL of the platform (CORRAL_NATS_URL)")
	f.StringVar(&by, "by", or(e.getenv("CORRAL_USER"), or(e.getenv("USER"), "anonymous")), "who asks (CORRAL_USER)")
	f.StringVar(&reason, "reason", "", "why, for the reviewer")
	f.IntVar(&l.Steps, "steps", 0, "model turns")
	f.Int64Var(&l.Tokens, "tokens", 0, "input and output tokens")
	f.Float64Var(&l.CostUSD, "cost-usd", 0, "cost in USD")
	f.Float64Var(&l.SandboxSeconds, "sandbox-seconds", 0, "seconds of sandbox time")
	f.DurationVar(&l.WallTime, "wall-time", 0, "wall time on one request, e.g. 2h")
	return cmd
}
