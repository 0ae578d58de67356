package main

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
	"corral.dev/pkg/event"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/sessionlog"
)

// BenchmarkGracefulRestart restarts each service in turn, gracefully, while
// 64 sessions run steps of one call each (`Bash true` and a Glob of
// /memories, in turn), and measures the steps
// (from the model's answer to its next request) that overlap a restart,
// beside those that run while nothing restarts, in the same run. A restart
// is in-process, as a supervisor's SIGTERM and start of a new process would
// be without the process's own start: the service's Run is cancelled and
// waited for (its grace period lets what is in flight finish), then a new
// instance of it starts. Each op restarts the harness, the
// sandbox-manager, the memory service and the approval service, each after
// a second of steady steps. It reports how many
// sessions failed, which must be none.
func BenchmarkGracefulRestart(b *testing.B) {
	const sessions = 64
	steady, during, failed := restarts(b, sessions, b.N)
	_, p99 := percentiles(b, steady, "steady-")
	_, rp99 := percentiles(b, during, "")
	b.ReportMetric(float64(failed), "failed-sessions")
	b.Logf("p99 step: %.2f ms during restarts (%d steps), %.2f ms steady (%d steps); %d of %d sessions failed", rp99, len(during), p99, len(steady), failed, sessions)
	if failed > 0 {
		b.Errorf("%d sessions failed across graceful restarts", failed)
	}
}

// A graceful restart of each service, in turn, fails no running session.
func TestGracefulRestartFailsNoSession(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bwrap is not on PATH")
	}
	if _, _, failed := restarts(t, 8, 1); failed > 0 {
		t.Errorf("%d of 8 sessions failed across graceful restarts", failed)
	}
}

// restarts runs sessions sessions of steps of one call each and, rounds
// times, restarts each service in turn, each after a second of steady
// steps. It returns the steps that overlapped no restart
// and those that overlapped one, and how many sessions failed.
func restarts(b testing.TB, sessions, rounds int) (steady, during []time.Duration, failed int) {
	b.Helper()
	var restarting, ending atomic.Bool
	var mu sync.Mutex
	answered := map[string]time.Time{}
	answeredDuring := map[string]bool{}
	_, js, getenv := benchPlatform(b, func(c modeltest.Conversation) (modeltest.Turn, error) {
		key := c.Messages[0].Text
		now := time.Now()
		mu.Lock()
		if at, ok := answered[key]; ok {
			if answeredDuring[key] || restarting.Load() {
				during = append(during, now.Sub(at))
			} else {
				steady = append(steady, now.Sub(at))
			}
		}
		answered[key], answeredDuring[key] = time.Now(), restarting.Load()
		mu.Unlock()
		if ending.Load() {
			return modeltest.Turn{Text: "done"}, nil
		}
		if modeltest.Turns(c)%2 == 1 {
			return modeltest.Turn{Calls: []modeltest.Call{{Name: "Glob", Input: map[string]any{"pattern": "*", "path": "/memories"}}}}, nil
		}
		return modeltest.Turn{Calls: []modeltest.Call{{Name: "Bash", Input: map[string]any{"command": "true"}}}}, nil
	})
	_, approvalKey, _ := ed25519.GenerateKey(nil)
	approvalEnv := func(k string) string {
		if k == "CORRAL_APPROVAL_SIGNING_KEY" {
			return event.EncodeKey(approvalKey)
		}
		return getenv(k)
	}
	ctx := context.Background()
	svcs := []*restartable{
		{name: credential.UserHarness, js: js, getenv: getenv},
		{name: credential.UserSandbox, js: js, getenv: getenv},
		{name: credential.UserMemory, js: js, getenv: getenv},
		{name: credential.UserApproval, js: js, getenv: approvalEnv},
	}
	for _, s := range svcs {
		if err := s.restart(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(s.stop)
	}
	ends := followSessionEnds(b, js, "bench")

	var ids []uuid.UUID
	for i := range sessions {
		session := uuid.Must(uuid.NewV7())
		ids = append(ids, session)
		req := event.Request{Header: event.NewHeader(event.TypeRequest, "bench", session), User: "bench", Prompt: fmt.Sprint("restart ", i)}
		if err := bus.Publish(ctx, js, bus.RequestSubject("bench", session, req.User), req.ID.String(), &req); err != nil {
			b.Fatal(err)
		}
	}
	// Measured once every session's sandbox is warm: a few steps each.
	natstest.WaitFor(b, time.Minute, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(steady) < 3*sessions {
			return fmt.Errorf("%d steps", len(steady))
		}
		steady, during = nil, nil
		return nil
	})
	if bb, ok := b.(*testing.B); ok {
		bb.ResetTimer()
	}
	for range rounds {
		for _, s := range svcs {
			time.Sleep(time.Second) // steady steps
			restarting.Store(true)
			if err := s.restart(); err != nil {
				b.Fatal(err)
			}
			restarting.Store(false)
		}
	}
	time.Sleep(time.Second)
	if bb, ok := b.(*testing.B); ok {
		bb.StopTimer()
	}
	ending.Store(true)
	for _, session := range ids {
		select {
		case ok := <-ends.of(session):
			if !ok {
				failed++
			}
		case <-time.After(time.Minute):
			b.Fatalf("session %s did not end", session)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	return steady, during, failed
}

// restartable is a service a benchmark restarts in-process.
type restartable struct {
	name   string // of one of [components]
	js     jetstream.JetStream
	getenv func(string) string
	cancel context.CancelFunc
	done   chan error
}

// restart stops the running instance, if any, waiting for its Run to
// return, and starts a new one.
func (r *restartable) restart() error {
	r.stop()
	// Each instance registers its metrics afresh.
	svc, err := components[r.name](context.Background(), envOn(r.js, r.getenv))
	if err != nil {
		return fmt.Errorf("start %s: %w", r.name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan error, 1)
	go func() { r.done <- svc.Run(ctx) }()
	return nil
}

func (r *restartable) stop() {
	if r.cancel == nil {
		return
	}
	r.cancel()
	<-r.done
	r.cancel = nil
}

// endedSessions says how each session of a tenant ended.
type endedSessions struct {
	mu    sync.Mutex
	ended map[uuid.UUID]chan bool
}

func (e *endedSessions) of(session uuid.UUID) chan bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ended[session] == nil {
		e.ended[session] = make(chan bool, 1)
	}
	return e.ended[session]
}

// followSessionEnds follows how the sessions of tenant end: completed (true) or
// failed (false).
func followSessionEnds(b testing.TB, js jetstream.JetStream, tenant string) *endedSessions {
	b.Helper()
	e := &endedSessions{ended: map[uuid.UUID]chan bool{}}
	for _, typ := range []string{event.TypeSessionCompleted, event.TypeSessionFailed} {
		cons, err := js.OrderedConsumer(context.Background(), bus.StreamEvents, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{fmt.Sprintf("events.%s.*.%s.*", tenant, event.Kind(typ))},
		})
		if err != nil {
			b.Fatal(err)
		}
		cc, err := cons.Consume(func(msg jetstream.Msg) {
			a, err := sessionlog.ParseSubject(msg.Subject())
			if err != nil {
				b.Error(err)
				return
			}
			if a.Type == event.TypeSessionFailed {
				b.Logf("session %s failed: %s", a.Session, msg.Data())
			}
			select {
			case e.of(a.Session) <- a.Type == event.TypeSessionCompleted:
			default:
			}
		})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(cc.Stop)
	}
	return e
}
