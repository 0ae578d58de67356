package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/webhookapi"
)

// webhookFlags are what every webhooks command needs to say whose
// webhooks.
type webhookFlags struct {
	url, tenant, user string
}

func (e *env) addWebhookFlags(cmd *cobra.Command, f *webhookFlags) {
	cmd.Flags().StringVar(&f.url, "nats", e.natsURL(), "NATS URL of the platform (CORRAL_NATS_URL)")
	cmd.Flags().StringVar(&f.tenant, "tenant", cmp.Or(e.getenv("CORRAL_TENANT"), "default"), "your tenant (CORRAL_TENANT)")
	cmd.Flags().StringVar(&f.user, "user", cmp.Or(e.getenv("CORRAL_USER"), e.getenv("USER"), "anonymous"), "you (CORRAL_USER)")
}

// ask sends req for op on f's tenant's webhooks to the gateway: a read as
// f's user, a change (or a test) on the tenant's own subject, which only a
// reviewer's or an operator's credential may publish on.
func (f *webhookFlags) ask(ctx context.Context, e *env, op string, req webhookapi.Request) (webhookapi.Reply, error) {
	subject := webhookapi.Subject(f.tenant, f.user, op)
	changes := op == webhookapi.OpAdd || op == webhookapi.OpRemove || op == webhookapi.OpTest
	if changes {
		subject = webhookapi.TenantSubject(f.tenant, op)
	}
	var reply webhookapi.Reply
	err := e.request(ctx, f.url, "gateway", subject, req, &reply)
	if changes && errors.Is(err, bus.ErrRefused) {
		return reply, &exitError{1, fmt.Errorf("adding, removing and testing webhooks takes a reviewer's or an operator's credential of tenant %s (corral credentials issue --role reviewer): a webhook sends the tenant's session events to an outside server. This credential may list them and their deliveries (%w)", f.tenant, err)}
	}
	return reply, err
}

func (e *env) webhooksCmd() *cobra.Command {
	var f webhookFlags
	cmd := &cobra.Command{
		Use:     "webhooks",
		Aliases: []string{"webhook"},
		Short:   "Manage the tenant's webhooks: session events POSTed to your server",
		Long: `A webhook is a URL of yours that the gateway POSTs the tenant's session
events to, as JSON signed with the webhook's secret (Standard Webhooks:
headers webhook-id, webhook-timestamp and webhook-signature). The events:

  session.idle             a request was answered (end of turn)
  session.requires_action  a call waits for a reviewer's confirmation
  session.budget_reached   a budget paused the session
  session.terminated       someone stopped the session
  session.failed           the session's request failed

Each is delivered at least once: an answer other than 2xx (or none within
the time-out) is retried with a growing delay, up to a number of attempts,
then recorded as failed. Receivers drop copies by webhook-id.

Anyone of the tenant may list the webhooks and their deliveries; adding,
removing and testing one takes a reviewer's or an operator's credential.
The secret is shown once, when the webhook is added:

  corral webhooks add https://example.com/corral --event session.idle --event session.failed
  corral webhooks test wh_...
  corral webhooks deliveries`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return e.listWebhooks(cmd, &f, false) },
	}
	e.addWebhookFlags(cmd, &f)
	var lf webhookFlags
	var asJSON bool
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the tenant's webhooks (never their secrets)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return e.listWebhooks(cmd, &lf, asJSON) },
	}
	e.addWebhookFlags(ls, &lf)
	jsonFlag(ls, &asJSON)
	cmd.AddCommand(ls, e.webhookAddCmd(), e.webhookRemoveCmd(), e.webhookTestCmd(), e.webhookDeliveriesCmd())
	return cmd
}

func (e *env) listWebhooks(cmd *cobra.Command, f *webhookFlags, asJSON bool) error {
	reply, err := f.ask(cmd.Context(), e, webhookapi.OpList, webhookapi.Request{})
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSONLines(e.stdout, reply.Webhooks...)
	}
	if len(reply.Webhooks) == 0 {
		fmt.Fprintln(e.stdout, "No webhooks: corral webhooks add URL adds one (with a reviewer's credential).")
		return nil
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tURL\tEVENTS\tADDED")
	for _, h := range reply.Webhooks {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", h.ID, h.URL, strings.Join(h.Events, ","), h.CreatedAt.Local().Format(time.DateTime))
	}
	return w.Flush()
}

func (e *env) webhookAddCmd() *cobra.Command {
	var f webhookFlags
	var events []string
	cmd := &cobra.Command{
		Use:   "add URL [--event EVENT]...",
		Short: "Add a webhook; its signing secret is shown this once",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, ev := range events {
				if !webhookapi.ValidEvent(ev) {
					return usageError(fmt.Errorf("--event %s: want one of %s", ev, strings.Join(webhookapi.Events(), ", ")))
				}
			}
			reply, err := f.ask(cmd.Context(), e, webhookapi.OpAdd, webhookapi.Request{URL: args[0], Events: events})
			if err != nil {
				return err
			}
			h := reply.Webhook
			fmt.Fprintf(e.stdout, "webhook %s added: %s gets %s\n", h.ID, h.URL, strings.Join(h.Events, ", "))
			fmt.Fprintf(e.stdout, "signing secret (shown this once; keep it with your receiver): %s\n", reply.Secret)
			return nil
		},
	}
	e.addWebhookFlags(cmd, &f)
	cmd.Flags().StringSliceVar(&events, "event", nil, "an event to send ("+strings.Join(webhookapi.Events(), ", ")+"); repeat for more (default: all)")
	return cmd
}

func (e *env) webhookRemoveCmd() *cobra.Command {
	var f webhookFlags
	cmd := &cobra.Command{
		Use:   "rm ID",
		Short: "Remove a webhook: nothing more is sent to it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := f.ask(cmd.Context(), e, webhookapi.OpRemove, webhookapi.Request{ID: args[0]}); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "webhook %s removed\n", args[0])
			return nil
		},
	}
	e.addWebhookFlags(cmd, &f)
	return cmd
}

func (e *env) webhookTestCmd() *cobra.Command {
	var f webhookFlags
	cmd := &cobra.Command{
		Use:   "test ID",
		Short: "Send a webhook.test event to a webhook now, once, and say how it went",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			reply, err := f.ask(cmd.Context(), e, webhookapi.OpTest, webhookapi.Request{ID: args[0]})
			if err != nil {
				return err
			}
			if len(reply.Deliveries) != 1 {
				return fmt.Errorf("the gateway answered %d deliveries, want 1", len(reply.Deliveries))
			}
			d := reply.Deliveries[0]
			if d.Outcome != webhookapi.Delivered {
				return &exitError{1, fmt.Errorf("test %s to webhook %s failed after %s: %s", d.MessageID, d.Webhook, d.Duration.Round(time.Millisecond), oneLine(printable(d.Error), 500))}
			}
			fmt.Fprintf(e.stdout, "test %s delivered to webhook %s: %d in %s\n", d.MessageID, d.Webhook, d.Status, d.Duration.Round(time.Millisecond))
			return nil
		},
	}
	e.addWebhookFlags(cmd, &f)
	return cmd
}

func (e *env) webhookDeliveriesCmd() *cobra.Command {
	var f webhookFlags
	var limit int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "deliveries [ID]",
		Short: "List the latest attempts to deliver the tenant's webhooks (one webhook's with ID)",
		Long: `Each attempt to POST an event to a webhook, oldest first: when, the
event and its webhook-id, the attempt's number, the receiver's status (or
why there was none) and what came of it: delivered, retrying (another
attempt follows) or failed (given up). Attempts are kept for 7 days.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := webhookapi.Request{Limit: limit}
			if len(args) == 1 {
				req.ID = args[0]
			}
			reply, err := f.ask(cmd.Context(), e, webhookapi.OpDeliveries, req)
			if err != nil {
				return err
			}
			return e.printDeliveries(reply.Deliveries, asJSON)
		},
	}
	e.addWebhookFlags(cmd, &f)
	cmd.Flags().IntVar(&limit, "limit", 50, "how many of the latest attempts")
	jsonFlag(cmd, &asJSON)
	return cmd
}

func (e *env) printDeliveries(ds []webhookapi.Delivery, asJSON bool) error {
	if asJSON {
		return writeJSONLines(e.stdout, ds...)
	}
	if len(ds) == 0 {
		fmt.Fprintln(e.stdout, "No deliveries in the last 7 days.")
		return nil
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TIME\tWEBHOOK\tEVENT\tSESSION\tMESSAGE\tATTEMPT\tSTATUS\tOUTCOME\tERROR")
	for _, d := range ds {
		session, status := "-", "-"
		if d.Session != [16]byte{} {
			session = d.Session.String()
		}
		if d.Status != 0 {
			status = fmt.Sprint(d.Status)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", d.Time.Local().Format(time.DateTime), d.Webhook, d.Event, session, d.MessageID,
			d.Attempt, status, d.Outcome, oneLine(printable(d.Error), 500))
	}
	return w.Flush()
}
