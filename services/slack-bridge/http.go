package slackbridge

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
)

// Paths Slack is pointed at: the Events API's request URL, the slash
// command's and interactivity's.
const (
	PathEvents      = "/slack/events"
	PathCommands    = "/slack/commands"
	PathInteractive = "/slack/interactivity"
)

// maxBody bounds a request's body; Slack's are a few kilobytes.
const maxBody = 1 << 20

// Handler returns the HTTP handler of Slack's requests. Every request must
// carry Slack's signature over its body and a timestamp within five
// minutes of now; any other is refused with 401 and has no effect.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+PathEvents, s.verified(s.handleEvents))
	mux.HandleFunc("POST "+PathCommands, s.verified(s.handleCommand))
	mux.HandleFunc("POST "+PathInteractive, s.verified(s.handleInteraction))
	return mux
}

// verified checks a request's Slack signature (v0: HMAC-SHA256 of
// "v0:<timestamp>:<body>" with the signing secret, compared in constant
// time) and its timestamp before h sees it.
func (s *Service) verified(h func(http.ResponseWriter, *http.Request, []byte)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			http.Error(w, "request body too large or unreadable", http.StatusRequestEntityTooLarge)
			return
		}
		sv, err := slack.NewSecretsVerifier(r.Header, string(s.cfg.SigningSecret))
		if err == nil {
			_, _ = sv.Write(body)
			err = sv.Ensure()
		}
		if err != nil {
			s.log.WarnContext(r.Context(), "request refused: bad Slack signature", "path", r.URL.Path, "remote", r.RemoteAddr, "err", err)
			msg := "missing or bad Slack signature"
			if errors.Is(err, slack.ErrExpiredTimestamp) {
				msg = "Slack request timestamp is more than five minutes from now"
			}
			http.Error(w, msg, http.StatusUnauthorized)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		h(w, r, body)
	}
}

func (s *Service) handleEvents(w http.ResponseWriter, r *http.Request, body []byte) {
	ctx := r.Context()
	outer, err := slackevents.ParseEvent(json.RawMessage(body), slackevents.OptionNoVerifyToken())
	if err != nil {
		var probe struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(body, &probe) != nil || probe.Type == "" {
			http.Error(w, "not an Events API request: "+err.Error(), http.StatusBadRequest)
			return
		}
		// An event of a kind this bridge does not take: Slack is told it
		// arrived, so that it does not send it again.
		s.log.DebugContext(ctx, "slack event ignored", "type", probe.Type, "err", err)
		w.WriteHeader(http.StatusOK)
		return
	}
	switch outer.Type {
	case slackevents.URLVerification:
		var c slackevents.ChallengeResponse
		if err := json.Unmarshal(body, &c); err != nil || c.Challenge == "" {
			http.Error(w, "url_verification without a challenge", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, c.Challenge)
		return
	case slackevents.CallbackEvent:
	default:
		w.WriteHeader(http.StatusOK)
		return
	}
	cb, _ := outer.Data.(*slackevents.EventsAPICallbackEvent)
	if cb == nil {
		w.WriteHeader(http.StatusOK)
		return
	}
	var bot string
	for _, a := range cb.Authorizations {
		if a.IsBot {
			bot = a.UserID
		}
	}
	log := s.log.With("event_id", cb.EventID, "team", cb.TeamID)
	if n := r.Header.Get("X-Slack-Retry-Num"); n != "" {
		// Handled like the first delivery, which may have failed: the
		// request it publishes has the same ID, so a delivery that did
		// succeed starts nothing twice.
		log.InfoContext(ctx, "slack retried an event", "retry", n, "reason", r.Header.Get("X-Slack-Retry-Reason"))
	}
	var q question
	switch e := outer.InnerEvent.Data.(type) {
	case *slackevents.AppMentionEvent:
		if e.BotID != "" || e.User == "" || (bot != "" && e.User == bot) {
			break
		}
		q = question{Team: cb.TeamID, Channel: e.Channel, ThreadTS: cmp.Or(e.ThreadTimeStamp, e.TimeStamp), TS: e.TimeStamp, User: e.User, Text: stripMention(e.Text, bot)}
	case *slackevents.MessageEvent:
		// Direct messages only; edits, deletions, joins and the like
		// come with a subtype, and bots' messages (ours too) with a
		// bot_id.
		if e.ChannelType != "im" || e.SubType != "" || e.BotID != "" || e.User == "" || (bot != "" && e.User == bot) {
			break
		}
		q = question{Team: cb.TeamID, Channel: e.Channel, ThreadTS: cmp.Or(e.ThreadTimeStamp, e.TimeStamp), TS: e.TimeStamp, User: e.User, Text: stripMention(e.Text, bot)}
	}
	if q.TS == "" {
		w.WriteHeader(http.StatusOK)
		return
	}
	if err := s.ask(ctx, q); err != nil {
		// Slack sends the event again: nothing is lost.
		log.WarnContext(ctx, "slack event failed, slack will retry", "err", err)
		http.Error(w, "cannot take the event now", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// question is a message to the app: a prompt for the session of its
// thread.
type question struct {
	Team, Channel string
	// ThreadTS is the thread's ts, TS the message's.
	ThreadTS, TS string
	User, Text   string
}

var mentionRE = regexp.MustCompile(`^\s*<@[A-Z0-9]+(\|[^>]*)?>`)

// stripMention removes the app's own mentions from a message; without
// knowing the app's user, a mention at the start.
func stripMention(text, bot string) string {
	if bot == "" {
		return strings.TrimSpace(mentionRE.ReplaceAllString(text, ""))
	}
	re := regexp.MustCompile(`<@` + regexp.QuoteMeta(bot) + `(\|[^>]*)?>`)
	return strings.TrimSpace(re.ReplaceAllString(text, ""))
}

// namespace derives the IDs of sessions and requests from Slack's.
var namespace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://corral.dev/slack"))

// SessionID returns the session of a Slack thread: the same for every
// message of the thread, in every run of the bridge.
func SessionID(team, channel, threadTS string) uuid.UUID {
	return uuid.NewSHA1(namespace, []byte("session\x00"+team+"\x00"+channel+"\x00"+threadTS))
}

// RequestID returns the request a Slack message makes: the same however
// often Slack delivers it, and whichever event (a mention, a direct
// message) it came as.
func RequestID(team, channel, ts string) uuid.UUID {
	return uuid.NewSHA1(namespace, []byte("request\x00"+team+"\x00"+channel+"\x00"+ts))
}

// requestMsgID returns the message ID the bridge publishes request req of
// tenant with: an HMAC of them keyed by the Slack app's signing secret,
// the same however often Slack delivers the message (and in every run of
// the bridge), so that a retried publish is dropped as a duplicate. Not
// req itself: the requests' stream drops a message whose ID it holds,
// whoever sent it and on whatever subject, and req is worked out from
// what anyone in the channel sees; a client of another tenant could send
// a message of that ID first, and this request would be dropped unseen.
// Only the bridge holds the secret. The harness also records a request
// once by its ID, so a message published again after the duplicate
// window (or after the secret changed) starts nothing twice either.
func requestMsgID(secret Secret, tenant string, req uuid.UUID) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("corral slack request\x00" + tenant + "\x00" + req.String()))
	return hex.EncodeToString(m.Sum(nil))
}

// UserPrefix is prefixed to Slack user IDs to make Corral users.
const UserPrefix = "slack:"

// ask publishes q's request for the session of its thread, after noting
// the thread and the request, and has the session followed.
func (s *Service) ask(ctx context.Context, q question) error {
	if q.Text == "" {
		return s.slack.postEphemeral(ctx, message{Channel: q.Channel, User: q.User, ThreadTS: threadOf(q), Text: "Ask me something: mention me with what to do, or write to me directly."})
	}
	tenant, ok := s.cfg.tenant(q.Team)
	if !ok {
		s.log.WarnContext(ctx, "slack message from a workspace of no tenant", "team", q.Team)
		return s.slack.postEphemeral(ctx, message{Channel: q.Channel, User: q.User, ThreadTS: threadOf(q), Text: noTenant})
	}
	session := SessionID(q.Team, q.Channel, q.ThreadTS)
	ref := sessionRef{Tenant: tenant, ID: session}
	tn, err := s.tenant(ref)
	if err != nil {
		return err
	}
	req := RequestID(q.Team, q.Channel, q.TS)
	now := time.Now().UTC()
	var seen bool
	owner := UserPrefix + q.User
	_, err = s.store.update(ctx, ref, func() (*thread, error) {
		// A new thread's session is followed from its log's end now:
		// nothing older is the thread's.
		var from uint64
		last, err := bus.LastBySubject(ctx, tn.js, bus.StreamEvents, bus.SessionEvents(tenant, session))
		switch {
		case err == nil:
			from = last.StreamSeq
		case !errors.Is(err, jetstream.ErrMsgNotFound):
			return nil, fmt.Errorf("session %s: %w", ref.key(), err)
		}
		return &thread{Session: session, Tenant: tenant, Team: q.Team, Channel: q.Channel, TS: q.ThreadTS, Seq: from, User: owner}, nil
	}, func(t *thread) {
		if t.User != "" {
			owner = t.User
		}
		if seen = t.seen(req); seen {
			return
		}
		if t.Waiting == nil {
			t.Waiting = make(map[uuid.UUID]time.Time)
		}
		if _, ok := t.Waiting[req]; !ok {
			t.Waiting[req] = now
		}
	})
	if err != nil {
		return err
	}
	if !seen {
		prompt := q.Text
		if owner != UserPrefix+q.User {
			// Someone else in the thread: the session stays its
			// starter's, and the model is told who wrote.
			prompt = fmt.Sprintf("(<@%s> writes in the thread:) %s", q.User, q.Text)
		}
		ev := event.Request{
			Header: event.Header{Type: event.TypeRequest, ID: req, Time: now, Tenant: tenant, Session: session},
			User:   owner,
			Model:  s.cfg.Model,
			Prompt: prompt,
		}
		// A second publish is dropped (see requestMsgID), and the
		// harness ignores a request already in the session's log.
		// The subject names the user: the harness takes it from there.
		if err := bus.Publish(ctx, tn.js, bus.RequestSubject(tenant, session, ev.User), requestMsgID(s.cfg.SigningSecret, tenant, req), &ev); err != nil {
			return err
		}
		s.log.InfoContext(ctx, "slack request", "tenant", tenant, "session", session, "request", req, "user", ev.User)
	}
	s.followLater(ctx, ref)
	return nil
}

// noTenant is what someone writing from a workspace of no tenant is told.
const noTenant = "This Slack workspace is not connected to Corral: ask whoever runs Corral's Slack bridge to add it (CORRAL_SLACK_TEAMS)."

// threadOf returns the thread a reply to q goes in: none for a message
// that starts none.
func threadOf(q question) string {
	if q.ThreadTS == q.TS {
		return ""
	}
	return q.ThreadTS
}

// commandWait bounds what a slash command does before Slack gets its
// answer (Slack waits three seconds).
const commandWait = 2500 * time.Millisecond

// handleCommand takes the slash command (/corral PROMPT): it starts a
// thread in the channel with the prompt, whose session answers there, and
// tells the user at once, only to them.
func (s *Service) handleCommand(w http.ResponseWriter, r *http.Request, body []byte) {
	cmd, err := slack.SlashCommandParse(r)
	if err != nil {
		http.Error(w, "not a slash command: "+err.Error(), http.StatusBadRequest)
		return
	}
	reply := func(text string) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"response_type": "ephemeral", "text": text})
	}
	text := strings.TrimSpace(cmd.Text)
	if text == "" || text == "help" {
		reply(fmt.Sprintf("Usage: `%s what to do`. I start a thread here and answer in it; write in the thread (mentioning me) to go on.", cmd.Command))
		return
	}
	tenant, ok := s.cfg.tenant(cmd.TeamID)
	if !ok {
		s.log.WarnContext(r.Context(), "slash command from a workspace of no tenant", "team", cmd.TeamID)
		reply(noTenant)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), commandWait)
	defer cancel()
	// The same signed request sent again (a replay) starts nothing.
	fresh, err := s.store.claim(ctx, tenant, commandKey(tenant, r.Header.Get("X-Slack-Request-Timestamp"), body), commandTTL)
	if err != nil {
		s.log.WarnContext(ctx, "slash command: claim", "err", err)
		reply("Corral cannot take requests just now; please try again.")
		return
	}
	if !fresh {
		s.log.WarnContext(ctx, "slash command sent again: ignored", "team", cmd.TeamID, "user", cmd.UserID, "remote", r.RemoteAddr)
		reply("This command was taken already.")
		return
	}
	ts, err := s.slack.postMessage(ctx, message{
		Channel: cmd.ChannelID,
		Text:    fmt.Sprintf("<@%s> asked: %s", cmd.UserID, esc(text)),
	})
	if err != nil {
		s.log.WarnContext(ctx, "slash command: start thread", "channel", cmd.ChannelID, "err", err)
		if permanent(err) {
			reply(fmt.Sprintf("I cannot post in this channel (%s): invite me to it, or write to me directly.", codeOf(err)))
		} else {
			reply("Slack did not take my message in time; please try again.")
		}
		return
	}
	q := question{Team: cmd.TeamID, Channel: cmd.ChannelID, ThreadTS: ts, TS: ts, User: cmd.UserID, Text: text}
	if err := s.ask(ctx, q); err != nil {
		s.log.WarnContext(ctx, "slash command", "err", err)
		reply("Corral cannot take requests just now; please try again.")
		return
	}
	reply("On it: I answer in the thread I started for this.")
}

func codeOf(err error) string {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Code
	}
	return err.Error()
}
