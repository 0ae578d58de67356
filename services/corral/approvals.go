package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"corral.dev/pkg/approvalapi"
	"corral.dev/pkg/bus"
	"corral.dev/pkg/callview"
	"corral.dev/pkg/event"
	"corral.dev/pkg/policy"
	"corral.dev/pkg/sessionlog"
)

// approvalJSON is an approval as approvals --json and approvals show
// --json print it.
type approvalJSON struct {
	ID          uuid.UUID       `json:"id"`
	Status      string          `json:"status"`
	Tenant      string          `json:"tenant"`
	Session     uuid.UUID       `json:"session"`
	Turn        int             `json:"turn"`
	User        string          `json:"user"`
	Tool        string          `json:"tool"`
	Input       json.RawMessage `json:"input"`
	Rule        string          `json:"rule"`
	Why         string          `json:"why"`
	Preview     string          `json:"preview,omitempty"`
	RequestedAt time.Time       `json:"requested_at"`
	ExpiresAt   *time.Time      `json:"expires_at,omitempty"`
	Reviewer    string          `json:"reviewer,omitempty"`
	Reason      string          `json:"reason,omitempty"`
	DecidedAt   time.Time       `json:"decided_at,omitzero"`
}

func newApprovalJSON(a *approvalapi.Approval) approvalJSON {
	return approvalJSON{
		ID: a.ID, Status: a.Status, Tenant: a.Tenant, Session: a.Session, Turn: a.Turn, User: a.User, Tool: a.Tool,
		Input: plainJSON(a.Input), Rule: a.Rule, Why: a.Why, Preview: a.Preview, RequestedAt: a.RequestedAt, ExpiresAt: a.ExpiresAt,
		Reviewer: a.Reviewer, Reason: a.Reason, DecidedAt: a.DecidedAt,
	}
}

func (e *env) approvalsCmd() *cobra.Command {
	var url, tenant, user string
	var all, asJSON bool
	cmd := &cobra.Command{
		Use:   "approvals",
		Short: "List the tool calls waiting for a reviewer",
		Long: `Lists the calls the policy holds for a person's approval, newest first;
--all adds those decided. Decide one with corral approve ID or corral deny ID,
or on the reviewers' web page. A call too long for its column ends in
[cut]: corral approvals show ID prints it whole.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var resp approvalapi.Response
			err := e.request(cmd.Context(), url, "approval service", approvalapi.Subject(tenant, user, bus.OpList), approvalapi.ListRequest{All: all}, &resp)
			if err != nil {
				return err
			}
			if asJSON {
				out := make([]approvalJSON, len(resp.Approvals))
				for i, a := range resp.Approvals {
					out[i] = newApprovalJSON(a)
				}
				return writeJSONLines(e.stdout, out...)
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
				call, cut := callview.Summary(a.Input, 60)
				if cut {
					// The rest is in corral approvals show ID.
					call += " [cut]"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.ID, status, a.Tenant, a.User, a.Tool, call, a.Rule, a.RequestedAt.Local().Format(time.DateTime))
			}
			return w.Flush()
		},
	}
	cmd.Flags().StringVar(&url, "nats", e.natsURL(), "NATS URL of the platform (CORRAL_NATS_URL)")
	cmd.Flags().StringVar(&tenant, "tenant", cmp.Or(e.getenv("CORRAL_TENANT"), "default"), "your tenant, whose approvals these are (CORRAL_TENANT)")
	cmd.Flags().StringVar(&user, "user", cmp.Or(e.getenv("CORRAL_USER"), e.getenv("USER"), "anonymous"), "you (CORRAL_USER)")
	cmd.Flags().BoolVar(&all, "all", false, "list decided approvals too")
	jsonFlag(cmd, &asJSON)
	cmd.AddCommand(e.keygenCmd("approvals"), e.approvalShowCmd())
	return cmd
}

func (e *env) approvalShowCmd() *cobra.Command {
	var url, tenant, user string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show a held tool call in full",
		Long: `Prints an approval with every argument of its call in full, nothing cut.
Code points a terminal would not show as written (bidirectional overrides,
zero-width characters, controls) are printed by name, as <U+202E>. An
Edit's preview, when there is one, is a diff of the file as it was when the
call was held (made by the service that runs the call), or a line saying why
there is none: informational, since a decision approves the arguments.
ID is the approval's ID or the first 4 or more of its hex digits.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := parseIDPrefix("approval", args[0])
			if err != nil {
				return err
			}
			var resp approvalapi.Response
			err = e.request(cmd.Context(), url, "approval service", approvalapi.Subject(tenant, user, bus.OpList), approvalapi.ListRequest{All: true}, &resp)
			if err != nil {
				return err
			}
			id, err := matchApproval(p, tenant, resp.Approvals)
			if err != nil {
				return err
			}
			found := false
			for _, a := range resp.Approvals {
				if a.ID != id {
					continue
				}
				if asJSON {
					// One line for each session the ID is in (a raise's
					// may be in more than one).
					if err := writeJSONLines(e.stdout, newApprovalJSON(a)); err != nil {
						return err
					}
					found = true
					continue
				}
				if found {
					fmt.Fprintln(e.stdout)
				}
				found = true
				vis := func(s string) string { v, _ := callview.Visible(s); return v }
				fmt.Fprintf(e.stdout, "approval %s of session %s (tenant %s, turn %d)\n", a.ID, a.Session, a.Tenant, a.Turn)
				fmt.Fprintf(e.stdout, "status: %s", a.Status)
				if a.Reviewer != "" {
					fmt.Fprintf(e.stdout, " by %s", vis(a.Reviewer))
				}
				if a.Reason != "" {
					fmt.Fprintf(e.stdout, ": %s", vis(a.Reason))
				}
				fmt.Fprintf(e.stdout, "\nasked by %s at %s, rule %s: %s\n", vis(a.User), a.RequestedAt.Local().Format(time.DateTime), vis(a.Rule), vis(a.Why))
				fmt.Fprint(e.stdout, callview.Text(a.Tool, a.Input, a.Preview))
			}
			if !found {
				return &exitError{1, fmt.Errorf("no approval %s in tenant %s", id, tenant)}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&url, "nats", e.natsURL(), "NATS URL of the platform (CORRAL_NATS_URL)")
	cmd.Flags().StringVar(&tenant, "tenant", cmp.Or(e.getenv("CORRAL_TENANT"), "default"), "your tenant, whose approval this is (CORRAL_TENANT)")
	cmd.Flags().StringVar(&user, "user", cmp.Or(e.getenv("CORRAL_USER"), e.getenv("USER"), "anonymous"), "you (CORRAL_USER)")
	jsonFlag(cmd, &asJSON)
	return cmd
}

func (e *env) decideCmd(approve bool) *cobra.Command {
	var url, tenant, user, reason, session string
	use, short := "approve ID", "Approve a held tool call: it runs"
	if !approve {
		use, short = "deny ID --reason R", "Deny a held tool call: the model gets the reason instead"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long: short + `.

The decision is made in the name of --user (CORRAL_USER): a reviewer's
credential decides as the user it names, an operator's as any. ID is the
approval's ID or the first 4 or more of its hex digits.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := parseIDPrefix("approval", args[0]); err != nil {
				return err
			}
			if !approve && strings.TrimSpace(reason) == "" {
				return &exitError{2, fmt.Errorf("say why with --reason: the model reads it")}
			}
			ctx := cmd.Context()
			id, err := e.findApproval(ctx, url, tenant, user, args[0])
			if err != nil {
				return err
			}
			req := approvalapi.DecideRequest{ID: id, Approve: approve, Reason: reason}
			if session != "" {
				if req.Session, err = e.findSessionAt(ctx, url, tenant, session); err != nil {
					return err
				}
			}
			var resp approvalapi.Response
			if err := e.request(ctx, url, "approval service", approvalapi.Subject(tenant, user, bus.OpDecide), req, &resp); err != nil {
				return err
			}
			a := resp.Approvals[0]
			fmt.Fprintf(e.stdout, "%s %s by %s: %s call of session %s\n", a.Status, a.ID, a.Reviewer, a.Tool, a.Session)
			return nil
		},
	}
	cmd.Flags().StringVar(&url, "nats", e.natsURL(), "NATS URL of the platform (CORRAL_NATS_URL)")
	cmd.Flags().StringVar(&tenant, "tenant", cmp.Or(e.getenv("CORRAL_TENANT"), "default"), "your tenant (CORRAL_TENANT)")
	cmd.Flags().StringVar(&user, "user", cmp.Or(e.getenv("CORRAL_USER"), e.getenv("USER"), "anonymous"), "you, the reviewer (CORRAL_USER)")
	cmd.Flags().StringVar(&reason, "reason", "", "why; the model reads it when the call is denied")
	cmd.Flags().StringVar(&session, "session", "", "the approval's session, when its ID is in more than one")
	return cmd
}

func (e *env) stopCmd() *cobra.Command {
	var url, by, reason string
	var tenant sessionTenant
	cmd := &cobra.Command{
		Use:   "stop SESSION",
		Short: "Stop a session: kill its running tool call and destroy its sandbox",
		Long: `Stops a session at once: the harness asks the model nothing more, the
running tool call is killed and the session's sandbox destroyed. A follow-up
request starts the session again, in a fresh sandbox.

The stop is a request as the session's user, which the harness records in
the session's log; the command returns once it has. SESSION is its ID or
the first 4 or more of its hex digits.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := parseIDPrefix("session", args[0]); err != nil {
				return err
			}
			nc, js, err := e.connect(url)
			if err != nil {
				return err
			}
			defer nc.Close()
			t, session, err := findSession(cmd.Context(), js, args[0], tenant.chosen(cmd))
			if err != nil {
				return err
			}
			return e.stopSession(cmd.Context(), js, t, session, by, reason)
		},
	}
	cmd.Flags().StringVar(&url, "nats", e.natsURL(), "NATS URL of the platform (CORRAL_NATS_URL)")
	e.sessionTenantFlag(cmd, &tenant)
	cmd.Flags().StringVar(&by, "by", cmp.Or(e.getenv("CORRAL_USER"), e.getenv("USER"), "anonymous"), "who stops it, for the log (CORRAL_USER)")
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the log")
	return cmd
}

// sessionState is what a session's log says of it.
type sessionState struct {
	// sess has folded the log up to last; its User is the session's.
	sess *sessionlog.Session
	// ended is how the session last ended: "completed", "failed",
	// "stopped", or "" while it runs.
	ended string
	// last is the stream sequence of the last event read.
	last uint64
}

// readSession reads a session's log through l.
func readSession(ctx context.Context, js jetstream.JetStream, l *sessionlog.Log, tenant string, session uuid.UUID) (*sessionState, error) {
	if err := checkPlatform(ctx, js, "the platform", tenant); err != nil {
		return nil, err
	}
	entries, sess, err := l.ReadAll(ctx, tenant, session)
	if err != nil {
		return nil, err
	}
	if len(entries) == 0 {
		return nil, &exitError{1, fmt.Errorf("no session %s in tenant %s", session, tenant)}
	}
	st := &sessionState{sess: sess, last: entries[len(entries)-1].Seq}
	for _, en := range entries {
		switch en.Event.(type) {
		case *event.SessionRequested:
			st.ended = ""
		case *event.SessionCompleted:
			st.ended = "completed"
		case *event.SessionFailed:
			st.ended = "failed"
		case *event.SessionStopped:
			st.ended = "stopped"
		}
	}
	return st, nil
}

// controlNamespace is the UUID namespace of the IDs of stops, derived from
// the session and the last event of its log.
var controlNamespace = uuid.MustParse("a0d7e27d-460b-4df8-82c1-d15bad671738")

func (e *env) stopSession(ctx context.Context, js jetstream.JetStream, tenant string, session uuid.UUID, by, reason string) error {
	l := e.sessionLog(js)
	st, err := readSession(ctx, js, l, tenant, session)
	if err != nil {
		return err
	}
	if st.ended != "" {
		fmt.Fprintf(e.stdout, "session %s has %s already\n", session, st.ended)
		return nil
	}
	ev := event.SessionStopped{Header: event.NewHeader(event.TypeSessionStopped, tenant, session), By: by, Reason: reason}
	// One stop per stretch of the log: its ID (the harness records a
	// stop once per ID) is the same for every stop after the same last
	// event, so a retried stop is recorded once, and a session restarted
	// by a follow-up can be stopped again. It is not the request's
	// message ID (see control).
	ev.ID = uuid.NewSHA1(controlNamespace, fmt.Appendf(nil, "%s:stopped:%d", bus.SessionKey(tenant, session), st.last))
	if err := e.control(ctx, js, l, st, &ev); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "stopped session %s\n", session)
	return nil
}

// controlWait is how long a stop or a raise waits for the harness to
// record it.
const controlWait = 30 * time.Second

// control asks the harness to record ev, a stop or a budget raise of st's
// session, and waits until it has. It is a request as the session's user,
// as read from the log: the harness records a stop or a raise only for
// that user, and a client credential publishes only as the users it may
// speak for (a user's credential, as its own user only). A request the
// harness refuses leaves nothing in the log, and control gives up after
// controlWait.
func (e *env) control(ctx context.Context, js jetstream.JetStream, l *sessionlog.Log, st *sessionState, ev event.Event) error {
	h := ev.Head()
	user := st.sess.User()
	if user == "" {
		return &exitError{1, fmt.Errorf("session %s has no request recorded yet", h.Session)}
	}
	// The message's ID is random: the requests stream drops a message
	// whose ID it has seen, whoever sent it, and an ID others can work
	// out (the event's is) would let them send it first and drop this.
	// The harness records the event once by its own ID.
	if err := bus.Publish(ctx, js, bus.RequestSubject(h.Tenant, h.Session, user), uuid.NewString(), ev); err != nil {
		return err
	}
	what := event.Kind(h.Type)
	wctx, cancel := context.WithTimeoutCause(ctx, controlWait,
		fmt.Errorf("the platform did not record the %s within %s (the DEADLETTER stream says why)", what, controlWait))
	defer cancel()
	err := follow(wctx, js, l, st.sess.Clone(), st.last, func(en sessionlog.Entry, _ uint64) (bool, error) {
		return en.Type == h.Type && en.Event.Head().ID == h.ID, nil
	})
	if err != nil && ctx.Err() == nil && wctx.Err() != nil {
		return &exitError{1, context.Cause(wctx)}
	}
	return err
}

func (e *env) raiseCmd() *cobra.Command {
	var url, by, reason string
	var tenantFlag sessionTenant
	var l policy.Limits
	cmd := &cobra.Command{
		Use:   "raise SESSION --reason R [--steps N] [--tokens N] [--cost-usd X] [--sandbox-seconds X] [--wall-time D]",
		Short: "Ask a reviewer to raise a session's budget caps",
		Long: `Asks for new caps for a session, typically one paused over its budget
(corral run prints the command to run). The request waits for a reviewer
like a held call (corral approvals lists it); once approved, a paused
session goes on where it was by itself (corral logs -f SESSION follows it),
and any session runs under the new caps from its next step.

The raise is a request as the session's user, which the harness records in
the session's log; the command returns once it has. SESSION is its ID or
the first 4 or more of its hex digits.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := parseIDPrefix("session", args[0]); err != nil {
				return err
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
			tenant, session, err := findSession(ctx, js, args[0], tenantFlag.chosen(cmd))
			if err != nil {
				return err
			}
			sl := e.sessionLog(js)
			st, err := readSession(ctx, js, sl, tenant, session)
			if err != nil {
				return err
			}
			// The harness records the raise as asked by the session's
			// user, whatever the body says.
			ev := event.BudgetRaise{
				Header: event.NewHeader(event.TypeBudgetRaise, tenant, session),
				Raise:  uuid.Must(uuid.NewV7()), User: st.sess.User(), Limits: limits, Reason: reason,
			}
			if err := e.control(ctx, js, sl, st, &ev); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "asked a reviewer to raise session %s's caps to %s: approval %s\n", session, limits, ev.Raise)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&url, "nats", e.natsURL(), "NATS URL of the platform (CORRAL_NATS_URL)")
	e.sessionTenantFlag(cmd, &tenantFlag)
	f.StringVar(&by, "by", "", "ignored: a raise is asked for as the session's user")
	_ = f.MarkDeprecated("by", "a raise is asked for as the session's user")
	f.StringVar(&reason, "reason", "", "why, for the reviewer")
	f.IntVar(&l.Steps, "steps", 0, "the most model turns (a count)")
	f.Int64Var(&l.Tokens, "tokens", 0, "the most input and output tokens, together (a count)")
	f.Float64Var(&l.CostUSD, "cost-usd", 0, "the most cost, in US dollars (e.g. 2.50), priced by the policy's price table")
	f.Float64Var(&l.SandboxSeconds, "sandbox-seconds", 0, "the most sandbox time, in seconds (e.g. 900)")
	f.DurationVar(&l.WallTime, "wall-time", 0, "the most wall-clock time on one request, as a Go duration (e.g. 90m, 2h)")
	return cmd
}
