package slackbridge

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/livetext"
)

// liveEvery is how often at most the progress message of a request is
// changed to show the model's text as it streams: Slack lets an app change
// a message about once a second (chat.update is rate-limited per
// workspace, and bursts on one message are refused), and the log's own
// changes of the message count against it too.
const liveEvery = time.Second

// maxLive is how much of the end of the model's text the progress message
// shows, in characters.
const maxLive = 1500

// liveStatus shows, in the progress message of the request a thread's
// session works on, the text of the model's turn as it streams: below
// what the log says of the request, quoted, at most once per liveEvery.
// Every change of the progress message while the session is followed goes
// through it (see [Service.status]), one at a time, so that what the log
// said last is never overwritten by text heard before it.
type liveStatus struct {
	slack *webAPI
	// send is held while the progress message is changed.
	send sync.Mutex

	mu   sync.Mutex
	turn livetext.Turn
	// msg is the progress message as the log last said it should read,
	// without the model's text, and active whether that text shows: while
	// the request is worked on, with no call waiting for a reviewer.
	msg    message
	active bool
	// dirty is set when the text shown is not the text heard; last is
	// when the message was last changed.
	dirty bool
	last  time.Time
	wake  chan struct{}
}

// liveStatuses are the liveStatus of the sessions followed, by
// [sessionRef.key].
type liveStatuses struct {
	mu sync.Mutex
	m  map[string]*liveStatus
}

func (ls *liveStatuses) get(r sessionRef) *liveStatus {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.m[r.key()]
}

func (ls *liveStatuses) set(r sessionRef, l *liveStatus) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.m == nil {
		ls.m = make(map[string]*liveStatus)
	}
	if l == nil {
		delete(ls.m, r.key())
		return
	}
	ls.m[r.key()] = l
}

// watchLive has the progress message of t's thread show the model's text
// of its session as it streams, heard on the session's live subject
// through tn's connection (its tenant's live output is what a client's
// credential may hear), until the returned stop, which the caller calls
// before it stops following the session.
func (s *Service) watchLive(ctx context.Context, tn *tenant, t *thread) (lv *liveStatus, stop func(), err error) {
	lv = &liveStatus{slack: s.slack, wake: make(chan struct{}, 1)}
	lv.sync(t)
	nc := tn.js.Conn()
	sub, err := nc.Subscribe(bus.LiveSubject(t.Tenant, t.Session), func(m *nats.Msg) {
		var l event.Live
		if json.Unmarshal(m.Data, &l) == nil {
			lv.hear(l)
		}
	})
	if err != nil {
		return nil, nil, fmt.Errorf("follow the live output of session %s: %w", t.ref().key(), err)
	}
	s.lives.set(t.ref(), lv)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-lv.wake:
			}
			lv.mu.Lock()
			wait := time.Until(lv.last.Add(liveEvery))
			lv.mu.Unlock()
			if wait > 0 {
				select {
				case <-done:
					return
				case <-time.After(wait):
				}
			}
			if err := lv.flush(ctx); err != nil && ctx.Err() == nil {
				s.log.WarnContext(ctx, "show the model's text in the progress message", "tenant", t.Tenant, "session", t.Session, "err", err)
			}
		}
	})
	return lv, func() {
		_ = sub.Unsubscribe()
		close(done)
		wg.Wait()
		s.lives.set(t.ref(), nil)
	}, nil
}

// hear takes a piece of the session's live output.
func (lv *liveStatus) hear(l event.Live) {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	if lv.turn.Hear(l) == livetext.Ignored {
		return
	}
	lv.dirty = true
	lv.poke()
}

// poke has the text heard shown, soon, if the message shows it.
func (lv *liveStatus) poke() {
	if !lv.active || !lv.dirty {
		return
	}
	select {
	case lv.wake <- struct{}{}:
	default:
	}
}

// recorded says the response to turn is recorded: its text is shown no
// more.
func (lv *liveStatus) recorded(turn int) {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	if lv.turn.Recorded(turn) != "" {
		lv.dirty = true
	}
}

// sync takes what the progress message should say from t, the thread as
// the log left it.
func (lv *liveStatus) sync(t *thread) {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	lv.active = t.Busy && t.Status != "" && len(t.Approvals) == 0
	if lv.active {
		lv.msg = message{Channel: t.Channel, TS: t.Status, Text: statusText(t, "working")}
	}
	// Text heard before the request's progress message was known.
	lv.poke()
}

// flush shows the text heard, if it is not shown.
func (lv *liveStatus) flush(ctx context.Context) error {
	lv.send.Lock()
	defer lv.send.Unlock()
	lv.mu.Lock()
	if !lv.dirty || !lv.active {
		lv.mu.Unlock()
		return nil
	}
	m := lv.compose()
	lv.dirty, lv.last = false, time.Now()
	lv.mu.Unlock()
	return lv.slack.update(ctx, m)
}

// set changes the progress message to m, as the log says it should read;
// working says the request is worked on, when the model's text shows
// below it.
func (lv *liveStatus) set(ctx context.Context, m message, working bool) error {
	lv.send.Lock()
	defer lv.send.Unlock()
	lv.mu.Lock()
	lv.msg, lv.active = m, working
	m = lv.compose()
	lv.dirty = lv.dirty && !working
	lv.last = time.Now()
	lv.mu.Unlock()
	return lv.slack.update(ctx, m)
}

// compose returns the progress message with the model's text below.
func (lv *liveStatus) compose() message {
	m := lv.msg
	text := strings.TrimSpace(lv.turn.Text())
	if !lv.active || text == "" {
		return m
	}
	if r := []rune(text); len(r) > maxLive {
		text = "…" + string(r[len(r)-maxLive:])
	}
	var b strings.Builder
	b.WriteString(m.Text)
	for line := range strings.SplitSeq(text, "\n") {
		b.WriteString("\n> ")
		b.WriteString(esc(line))
	}
	m.Text = b.String()
	return m
}
