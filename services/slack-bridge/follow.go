package slackbridge

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/slack-go/slack"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/callview"
	"corral.dev/pkg/event"
	"corral.dev/pkg/sessionlog"
)

// follow reads the log of session from after the last event whose effect
// in its thread is done, and posts each event's, until the thread is no
// longer open or ctx is done. Failures are retried with a growing delay.
func (s *Service) follow(ctx context.Context, session sessionRef) {
	delay := time.Second
	for ctx.Err() == nil {
		err := s.followOnce(ctx, session)
		if err == nil || ctx.Err() != nil {
			return
		}
		s.log.WarnContext(ctx, "follow session, will retry", "tenant", session.Tenant, "session", session.ID, "err", err, "in", delay)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, 30*time.Second)
	}
}

// pollFor bounds one wait for the next event, after which the thread is
// read again to see whether it is still open.
const pollFor = 30 * time.Second

// followPull is how many events a followed thread's session has pulled
// ahead of those posted, at most.
const followPull = 16

// followed are the kinds of events whose effect shows in a thread; a
// session's lifecycle events are all of its session.* ones.
var followed = []string{
	event.TypeToolDispatched,
	event.TypeModelResponded, // which dispatches most calls
	event.TypeApprovalRequested,
	event.TypeApprovalDecided,
}

// shown reports whether an event on subject, of a session's log, is of a
// kind whose effect shows in a thread. The others are skipped unread.
func shown(subject string) bool {
	tok := strings.Split(subject, ".")
	if len(tok) < 5 {
		return false
	}
	if tok[3] == "session" {
		return true
	}
	kind := tok[3] + "." + tok[4]
	return len(tok) == 6 && slices.ContainsFunc(followed, func(typ string) bool { return event.Kind(typ) == kind })
}

func (s *Service) followOnce(ctx context.Context, session sessionRef) error {
	tn, err := s.tenant(session)
	if err != nil {
		return err
	}
	t, _, err := s.store.get(ctx, session)
	if errors.Is(err, errNoThread) {
		return nil
	}
	if err != nil {
		return err
	}
	if !t.open(time.Now()) {
		return nil
	}
	// One filter, every event of the thread's session, named in the
	// consumer's create subject: what a client's credential may read,
	// its own tenant's logs alone. Every event read is judged by its
	// subject: a body naming another tenant, session or type, or an event
	// its writer may not write, posts nothing.
	cons, err := tn.js.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.SessionEvents(session.Tenant, session.ID)},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    t.Seq + 1,
		// One consumer for the whole follow, which pulls again only once
		// most of what it pulled is posted: posting may take a while
		// (Slack's rate limits, a thread catching up).
		InactiveThreshold: 2 * pollFor,
	})
	if err != nil {
		return fmt.Errorf("follow session %s: %w", session.key(), err)
	}
	// Gone once the thread is no longer followed.
	defer bus.DeleteOrdered(ctx, tn.js, bus.StreamEvents, cons)
	// One pull subscription for as long as the thread is followed: an
	// ordered consumer's Next makes a new consumer on the server at each
	// call, every event and every poll. A few events are pulled ahead.
	events, err := cons.Messages(jetstream.PullMaxMessages(followPull), jetstream.PullHeartbeat(bus.PullHeartbeat))
	if err != nil {
		return fmt.Errorf("follow session %s: %w", session.key(), err)
	}
	defer events.Stop()
	log := s.log.With("tenant", session.Tenant, "session", session.ID)
	log.DebugContext(ctx, "following session", "from", t.Seq+1)
	live, stopLive, err := s.watchLive(ctx, tn, t)
	if err != nil {
		return err
	}
	defer stopLive()
	for {
		wait := pollFor
		if !t.Busy {
			wait = min(wait, max(time.Until(t.expiry()), time.Millisecond))
		}
		fctx, cancel := context.WithTimeout(ctx, wait)
		msg, err := events.Next(jetstream.NextContext(fctx))
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			if errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, context.DeadlineExceeded) {
				if t, _, err = s.store.get(ctx, session); err != nil {
					return err
				}
				live.sync(t)
				if !t.open(time.Now()) {
					log.DebugContext(ctx, "thread closed")
					return nil
				}
				continue
			}
			return fmt.Errorf("follow session %s: %w", session.key(), err)
		}
		meta, err := msg.Metadata()
		if err != nil {
			return fmt.Errorf("follow session %s: %w", session.key(), err)
		}
		seq := meta.Sequence.Stream
		if seq <= t.Seq || !shown(msg.Subject()) {
			continue
		}
		var ev any
		e, err := tn.logs.Judge(ctx, bus.FromDelivery(msg))
		switch {
		case err == nil:
			ev = e.Event
		case errors.Is(err, sessionlog.ErrRejected):
			// Counted and logged by the Log; the thread shows nothing of
			// it, and goes on past it.
		default:
			// Its stored payload is out of reach for now: read it again.
			return fmt.Errorf("follow session %s: %w", session.key(), err)
		}
		if r, ok := ev.(*event.ModelResponded); ok {
			live.recorded(r.Turn)
		}
		if t, err = s.handle(ctx, t, ev, seq, meta.NumPending); err != nil {
			return err
		}
		live.sync(t)
		if !t.open(time.Now()) {
			log.DebugContext(ctx, "thread closed", "seq", seq)
			return nil
		}
	}
}

// onDispatched counts calls dispatched in t's thread and shows the last
// as running, unless more of the session's events are pending.
func (s *Service) onDispatched(ctx context.Context, t *thread, ds []*event.ToolDispatched, pending uint64) (func(t *thread), error) {
	last := ds[len(ds)-1]
	t2 := *t
	t2.Calls, t2.Last = t.Calls+len(ds), oneLine(last.Name+" "+last.Summary, 80)
	var err error
	if pending == 0 && t.Status != "" {
		err = s.status(ctx, &t2, "working")
	}
	return func(t *thread) { t.Calls, t.Last = t2.Calls, t2.Last }, err
}

// handle posts into t's thread what event ev (sequence seq, with pending
// more of the session's events after it) means there, then records that
// it did. A Slack error that no retry can fix (the app was removed from
// the channel, say) is logged and the event counted as done; any other
// error is returned, and the event handled again later.
func (s *Service) handle(ctx context.Context, t *thread, ev any, seq, pending uint64) (*thread, error) {
	var change func(t *thread)
	var err error
	switch e := ev.(type) {
	case *event.SessionRequested:
		change, err = s.onRequested(ctx, t, e, seq)
	case *event.ModelResponded:
		ds := e.Dispatches()
		if len(ds) == 0 {
			break
		}
		change, err = s.onDispatched(ctx, t, ds, pending)
	case *event.ToolDispatched:
		change, err = s.onDispatched(ctx, t, []*event.ToolDispatched{e}, pending)
	case *event.ApprovalRequested:
		var ts, text string
		ts, text, err = s.askReviewers(ctx, t, seq, e)
		if err == nil && t.Status != "" {
			err = s.status(ctx, t, "waiting")
		}
		change = func(t *thread) {
			if ts == "" {
				return
			}
			if t.Approvals == nil {
				t.Approvals = make(map[uuid.UUID]approvalMsg)
			}
			t.Approvals[e.Call] = approvalMsg{TS: ts, Text: text}
		}
	case *event.ApprovalDecided:
		waiting := len(t.Approvals)
		if a, ok := t.Approvals[e.Call]; ok {
			waiting--
			err = s.slack.update(ctx, message{Channel: t.Channel, TS: a.TS, Text: "Approval decided",
				Blocks: decidedBlocks(a.Text, decisionText(e.Approved, e.Reviewer, e.Reason))})
		}
		if err == nil && t.Status != "" && t.Busy && waiting == 0 {
			err = s.status(ctx, t, "working")
		}
		change = func(t *thread) { delete(t.Approvals, e.Call) }
	case *event.SessionCompleted:
		if t.Status != "" {
			err = s.status(ctx, t, "done")
		}
		if err == nil {
			_, err = s.postOnce(ctx, t, seq, message{Channel: t.Channel, ThreadTS: t.TS, Text: answerText(e.Answer, t.Session)})
		}
		change = ended
	case *event.SessionFailed:
		what := fmt.Sprintf("❌ The session failed (%s): %s", esc(e.Code), esc(e.Reason))
		if e.Budget != "" {
			what = fmt.Sprintf("❌ The session is over its budget `%s`: %s", esc(e.Budget), esc(e.Reason))
		}
		change, err = s.onEnd(ctx, t, seq, what)
	case *event.SessionStopped:
		what := "⏹ Stopped by " + esc(e.By)
		if e.Reason != "" {
			what += ": " + esc(e.Reason)
		}
		change, err = s.onEnd(ctx, t, seq, what)
	case *event.SessionPaused:
		err = s.onPaused(ctx, t, seq, e)
	case *event.SessionResumed:
		if t.Status != "" {
			err = s.status(ctx, t, "working")
		}
		if err == nil {
			_, err = s.postOnce(ctx, t, seq, message{Channel: t.Channel, ThreadTS: t.TS, Text: "▶️ Going on: " + esc(e.Reviewer) + " raised the session's budget."})
		}
	}
	if err != nil && !permanent(err) {
		return t, err
	}
	if err != nil {
		s.log.ErrorContext(ctx, "slack refused a message; going on without it", "session", t.Session, "stream_seq", seq, "err", err)
	}
	return s.store.update(ctx, t.ref(), nil, func(t *thread) {
		if change != nil && t.Seq < seq {
			change(t)
		}
		t.Seq, t.Posting = max(t.Seq, seq), 0
	})
}

func (s *Service) onRequested(ctx context.Context, t *thread, e *event.SessionRequested, seq uint64) (func(t *thread), error) {
	if t.Busy {
		// A follow-up while the session works: it joins the request
		// in progress.
		return func(t *thread) { t.saw(e.Request) }, nil
	}
	ts, err := s.postOnce(ctx, t, seq, message{Channel: t.Channel, ThreadTS: t.TS, Text: statusText(&thread{}, "working")})
	return func(t *thread) {
		t.saw(e.Request)
		t.Busy, t.Status, t.Calls, t.Last = true, ts, 0, ""
	}, err
}

// onEnd marks the current request failed or stopped, says so in the
// thread, and marks the approvals still asked for as cancelled.
func (s *Service) onEnd(ctx context.Context, t *thread, seq uint64, what string) (func(t *thread), error) {
	if t.Status != "" {
		if err := s.status(ctx, t, what); err != nil && !permanent(err) {
			return nil, err
		}
	}
	for _, a := range t.Approvals {
		err := s.slack.update(ctx, message{Channel: t.Channel, TS: a.TS, Text: "Approval cancelled",
			Blocks: decidedBlocks(a.Text, "⏹ Cancelled: the session ended")})
		if err != nil && !permanent(err) {
			return nil, err
		}
	}
	_, err := s.postOnce(ctx, t, seq, message{Channel: t.Channel, ThreadTS: t.TS, Text: what})
	return func(t *thread) {
		ended(t)
		t.Approvals = nil
	}, err
}

// onPaused says in t's thread that its session is paused over a budget,
// and what lets it go on. The request stays in progress, and the thread
// followed, with its approvals: the session goes on where it was once a
// reviewer raises its budget, and its answer lands here.
func (s *Service) onPaused(ctx context.Context, t *thread, seq uint64, e *event.SessionPaused) error {
	if t.Status != "" {
		if err := s.status(ctx, t, fmt.Sprintf("⏸ Paused over its budget `%s`", esc(e.Budget))); err != nil && !permanent(err) {
			return err
		}
	}
	what := fmt.Sprintf("⏸ The session is paused over its budget `%s`: %s\nIt keeps its workspace and goes on where it was; to go on: `%s`",
		esc(e.Budget), esc(e.Reason), esc(e.Resume))
	_, err := s.postOnce(ctx, t, seq, message{Channel: t.Channel, ThreadTS: t.TS, Text: what})
	return err
}

// ended marks the request in progress as ended.
func ended(t *thread) { t.Busy, t.Status, t.Calls, t.Last = false, "", 0, "" }

// status changes the progress message of t's request; while the session
// is followed, through what shows the model's text in it.
func (s *Service) status(ctx context.Context, t *thread, state string) error {
	m := message{Channel: t.Channel, TS: t.Status, Text: statusText(t, state)}
	if lv := s.lives.get(t.ref()); lv != nil {
		return lv.set(ctx, m, state == "working")
	}
	return s.slack.update(ctx, m)
}

// metadataType is the event_type of the metadata of every message the
// bridge posts for an event: it names the session and the event's
// sequence, so that a message posted just before a crash is found.
const metadataType = "corral_event"

// postOnce posts m into t's thread as the effect of event seq, once: the
// attempt is recorded before the post, and a bridge that finds an
// attempt recorded looks in the thread for the message first.
func (s *Service) postOnce(ctx context.Context, t *thread, seq uint64, m message) (string, error) {
	key := strconv.FormatUint(seq, 10)
	m.Metadata = &slack.SlackMetadata{EventType: metadataType, EventPayload: map[string]any{"session": t.Session.String(), "seq": key}}
	if t.Posting == seq {
		replies, err := s.slack.replies(ctx, t.Channel, t.TS)
		switch {
		case err == nil:
			for _, r := range replies {
				if r.Metadata != nil && r.Metadata.EventType == metadataType &&
					fmt.Sprint(r.Metadata.EventPayload["session"]) == t.Session.String() &&
					fmt.Sprint(r.Metadata.EventPayload["seq"]) == key {
					return r.TS, nil
				}
			}
		case permanent(err):
			// Without the history scopes the thread cannot be read: post,
			// at the risk of posting twice.
			s.log.WarnContext(ctx, "cannot read the thread to find a message posted before a restart", "session", t.Session, "err", err)
		default:
			return "", err
		}
	} else {
		var err error
		if _, err = s.store.update(ctx, t.ref(), nil, func(t *thread) { t.Posting = seq }); err != nil {
			return "", err
		}
		t.Posting = seq
	}
	return s.slack.postMessage(ctx, m)
}

// askReviewers posts a held call into t's thread, with the buttons that
// decide it only when the thread shows the whole call: in the message, or
// in a file uploaded into the thread after it. A call too long for a
// message whose file Slack refuses gets no buttons: it is decided with
// the CLI or on the reviewers' page, which show it whole. It returns the
// message's ts and text.
func (s *Service) askReviewers(ctx context.Context, t *thread, seq uint64, e *event.ApprovalRequested) (string, string, error) {
	text, fits := callText(e.Tool, e.Input, e.Preview, e.Rule, e.Reason)
	m := message{Channel: t.Channel, ThreadTS: t.TS, Text: fmt.Sprintf("Approval needed for %s", esc(e.Tool))}
	if fits {
		m.Blocks = approvalBlocks(text, t.Session, e.Call)
		ts, err := s.postOnce(ctx, t, seq, m)
		return ts, text, err
	}
	m.Blocks = textBlocks(text + "\n_The whole call follows as a file._")
	ts, err := s.postOnce(ctx, t, seq, m)
	if err != nil {
		return "", "", err
	}
	err = s.slack.uploadFile(ctx, t.Channel, t.TS, callFile(e.Call), "The whole "+e.Tool+" call waiting for approval", []byte(callview.Text(e.Tool, e.Input, e.Preview)))
	switch {
	case err != nil && !permanent(err):
		return "", "", err // tried again, and the message found again
	case err != nil:
		s.log.WarnContext(ctx, "slack refused the file of a call too long for a message: no buttons", "session", t.Session, "call", e.Call, "err", err)
	}
	text += fileNote(e.Call, err == nil)
	m.TS, m.ThreadTS = ts, ""
	if err == nil {
		m.Blocks = approvalBlocks(text, t.Session, e.Call)
	} else {
		m.Blocks = textBlocks(text)
	}
	return ts, text, s.slack.update(ctx, m)
}
