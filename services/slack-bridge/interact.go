package slackbridge

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/slack-go/slack"

	"corral.dev/pkg/approvalapi"
	"corral.dev/pkg/bus"
)

// handleInteraction takes clicks on the Approve and Deny buttons. Slack is
// answered at once; the decision is made meanwhile, through the approval
// service as the reviewer of the workspace's tenant's credential, with a
// reason naming who clicked, and the message then shows the decision. A
// click by someone who is not a mapped reviewer is refused with a message
// only they see.
func (s *Service) handleInteraction(w http.ResponseWriter, r *http.Request, body []byte) {
	form, err := url.ParseQuery(string(body))
	if err != nil || form.Get("payload") == "" {
		http.Error(w, "want a form with a payload", http.StatusBadRequest)
		return
	}
	var cb slack.InteractionCallback
	if err := json.Unmarshal([]byte(form.Get("payload")), &cb); err != nil {
		http.Error(w, "payload: "+err.Error(), http.StatusBadRequest)
		return
	}
	w.WriteHeader(http.StatusOK)
	if cb.Type != slack.InteractionTypeBlockActions {
		return
	}
	for _, a := range cb.ActionCallback.BlockActions {
		if a.ActionID != ActionApprove && a.ActionID != ActionDeny {
			continue
		}
		c := click{
			User:     cb.User.ID,
			Team:     cmp.Or(cb.Team.ID, cb.User.TeamID),
			Channel:  cmp.Or(cb.Channel.ID, cb.Container.ChannelID),
			TS:       cmp.Or(cb.Container.MessageTs, cb.Message.Timestamp),
			ThreadTS: cmp.Or(cb.Message.ThreadTimestamp, cb.Container.ThreadTs),
			Approve:  a.ActionID == ActionApprove,
			Value:    a.Value,
		}
		select {
		case s.work <- func(ctx context.Context) { s.decide(ctx, c) }:
		case <-r.Context().Done():
			return
		}
	}
}

// click is a click on an approval button.
type click struct {
	User, Team, Channel string
	// TS is the message with the button, ThreadTS its thread.
	TS, ThreadTS string
	Approve      bool
	Value        string
}

// decideWait bounds a decision through the approval service.
const decideWait = 30 * time.Second

func (s *Service) decide(ctx context.Context, c click) {
	log := s.log.With("user", c.User, "channel", c.Channel)
	tell := func(text string) {
		err := s.slack.postEphemeral(ctx, message{Channel: c.Channel, User: c.User, ThreadTS: c.ThreadTS, Text: text})
		if err != nil {
			log.WarnContext(ctx, "tell the clicker", "err", err)
		}
	}
	name, ok := s.cfg.Reviewers[c.User]
	if !ok {
		log.InfoContext(ctx, "approval click refused: not a reviewer")
		tell("You are not one of Corral's reviewers, so your click decided nothing. Reviewers are listed in the bridge's CORRAL_SLACK_REVIEWERS.")
		return
	}
	tenant, ok := s.cfg.tenant(c.Team)
	if !ok {
		log.WarnContext(ctx, "approval click from a workspace of no tenant", "team", c.Team)
		tell(noTenant)
		return
	}
	session, call, err := parseApprovalValue(c.Value)
	if err == nil && c.ThreadTS != "" && SessionID(c.Team, c.Channel, c.ThreadTS) != session {
		err = errors.New("the button is not from this thread's session")
	}
	if err != nil {
		log.WarnContext(ctx, "approval click refused", "err", err)
		tell("That button does not name an approval of this thread; nothing was decided.")
		return
	}
	tn, err := s.tenant(sessionRef{Tenant: tenant, ID: session})
	if err != nil || tn.reviewer == "" {
		// New lets no bot's credential in with reviewers mapped.
		log.ErrorContext(ctx, "approval click: the tenant's credential decides nothing", "tenant", tenant, "err", err)
		tell("Nothing was decided: this bridge's credential for the workspace may not decide approvals.")
		return
	}
	// Decided as the credential's reviewer, the one its permissions let
	// it name; who clicked is in the reason.
	req := approvalapi.DecideRequest{ID: call, Session: session, Approve: c.Approve, Reason: decisionReason(name, c.User)}
	a, code, err := s.requestDecision(ctx, tn.js.Conn(), approvalapi.Subject(tenant, tn.reviewer, bus.OpDecide), req)
	switch {
	case err == nil:
		log.InfoContext(ctx, "approval decided in slack", "call", call, "status", a.Status, "reviewer", name)
		text, fits := callText(a.Tool, a.Input, a.Preview, a.Rule, a.Why)
		if !fits {
			text += fileNote(a.ID, true)
		}
		uerr := s.slack.update(ctx, message{Channel: c.Channel, TS: c.TS, Text: "Approval decided",
			Blocks: decidedBlocks(text, decisionText(a.Status == approvalapi.Approved, a.Reviewer, a.Reason))})
		if uerr != nil {
			log.WarnContext(ctx, "show the decision", "err", uerr)
		}
	case code == approvalapi.CodeDecided:
		tell(esc(err.Error()))
	default:
		log.WarnContext(ctx, "approval click", "call", call, "err", err)
		tell("Nothing was decided: " + esc(err.Error()))
	}
}

// requestDecision sends req to the approval service's API on nc and
// returns the approval decided, or the API's error and its code. A
// service that is starting answers soon, and one that has not yet read
// the approval's request from the session's log (the button went up as
// soon as the bridge read it) knows it soon: both are asked again until
// decideWait.
func (s *Service) requestDecision(ctx context.Context, nc *nats.Conn, subject string, req approvalapi.DecideRequest) (*approvalapi.Approval, string, error) {
	data, err := json.Marshal(req)
	if err != nil {
		return nil, "", err
	}
	ctx, cancel := context.WithTimeout(ctx, decideWait)
	defer cancel()
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		msg, err := nc.RequestWithContext(ctx, subject, data)
		var code string
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			err = errors.New("the approval service is not running")
		case err != nil:
			return nil, "", fmt.Errorf("approval service: %w", err)
		case msg.Header.Get("Nats-Service-Error") != "":
			code, err = msg.Header.Get("Nats-Service-Error-Code"), errors.New(msg.Header.Get("Nats-Service-Error"))
		default:
			var resp approvalapi.Response
			if err := json.Unmarshal(msg.Data, &resp); err != nil || len(resp.Approvals) == 0 {
				return nil, "", fmt.Errorf("approval service: unreadable answer")
			}
			return resp.Approvals[0], "", nil
		}
		if code != "" && code != approvalapi.CodeNotFound {
			return nil, code, err
		}
		select {
		case <-ctx.Done():
			return nil, code, err
		case <-time.After(wait):
		}
	}
}
