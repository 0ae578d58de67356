package sessionlog

import (
	"context"
	"errors"
	"sync"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/prometheus/client_golang/prometheus"

	"corral.dev/pkg/bus"
)

// ErrRejected is matched by every error rejecting an event; it is
// [bus.ErrRejected], so that a consumer's handler can return the error as
// it is and have the message dead-lettered.
var ErrRejected = bus.ErrRejected

// rejectedTotal counts rejected events by reader and reason, both from
// closed sets.
var rejectedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "corral_sessionlog_rejected_total",
	Help: "Session log events rejected (not folded, run, counted or shown), by reader and reason.",
}, []string{"reader", "reason"})

// Register adds the package's metrics to reg; registering them twice (every
// service of corral dev shares one registry) is not an error.
func Register(reg prometheus.Registerer) error {
	if err := reg.Register(rejectedTotal); err != nil {
		if _, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); !ok {
			return err
		}
	}
	return nil
}

// judged remembers the events a process rejected lately, so that each is
// logged and dead-lettered once however often it is read.
type judged struct {
	mu   sync.Mutex
	seen *lru.Cache[uint64, struct{}]
}

func newJudged() *judged {
	c, _ := lru.New[uint64, struct{}](4096) // cannot fail for a positive size
	return &judged{seen: c}
}

// first reports whether the event at seq was not rejected here lately.
func (j *judged) first(seq uint64) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	if seq == 0 {
		return true
	}
	if j.seen.Contains(seq) {
		return false
	}
	j.seen.Add(seq, struct{}{})
	return true
}

// rejected counts, logs and dead-letters the message m, rejected for err,
// and returns err.
func (l *Log) rejected(ctx context.Context, m bus.Msg, err error) error {
	if !errors.Is(err, ErrRejected) {
		err = reject(ReasonUndecodable, "%v", err)
	}
	reason := ReasonOf(err)
	rejectedTotal.WithLabelValues(l.o.Reader, reason).Inc()
	if !l.judged.first(m.StreamSeq) {
		return err
	}
	l.o.Logger.WarnContext(ctx, "session log event rejected", "reader", l.o.Reader, "subject", m.Subject, "stream_seq", m.StreamSeq, "reason", reason, "err", err)
	if l.o.DeadLetters {
		if derr := bus.DeadLetter(ctx, l.js, bus.StreamEvents, l.o.Reader, m, err, bus.RejectedID(bus.StreamEvents, m.StreamSeq)); derr != nil {
			l.o.Logger.WarnContext(ctx, "dead letter", "subject", m.Subject, "stream_seq", m.StreamSeq, "err", derr)
		}
	}
	return err
}
