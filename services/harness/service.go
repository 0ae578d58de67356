// Package harness is Corral's agent loop. It turns requests into sessions,
// asks the model for each turn, records every response before acting on it,
// dispatches tool calls as durable messages, and folds their results back
// until the model answers. It holds the model credentials and never runs a
// tool call itself.
package harness

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/lease"
	"corral.dev/pkg/lock"
	"corral.dev/pkg/model"
	"corral.dev/pkg/process"
	"corral.dev/pkg/sessionlog"
	"corral.dev/pkg/version"
)

// Service is the harness.
type Service struct {
	cfg       Config
	js        jetstream.JetStream
	providers model.Providers
	// leases are the sessions' leases: freed remembers the revisions
	// this harness freed them at; held are those lingering here after
	// their sessions' steps; stopping is set once the harness stops, when
	// none may linger.
	leases   lease.Bucket
	freed    freedLeases
	held     heldLeases
	stopping atomic.Bool
	// days reads the daily usage for budget checks.
	days *dayUsages
	// counter counts the daily usage that the budget checks read.
	counter *usageCounter
	skills  *skillIndex
	// environments are the tenants' environments, which a session's
	// first request names (or its tenant's default).
	environments jetstream.KeyValue
	log          *slog.Logger
	// logs reads and writes the session logs, as the harness.
	logs   *sessionlog.Log
	folded foldCache
	// watched are the running sessions stepped here, for the wall-time
	// watch.
	watched watchedSessions
	// sessions serialises this process's work on a session, so that only
	// one piece of it holds (and renews) the session's lease at a time.
	sessions lock.Keyed
	// gate admits requests and steps alike: one at a time per session,
	// a bounded share per tenant. One waiting for its session or tenant
	// holds no slot.
	admission *lock.Gate
	metrics   *serviceMetrics
}

// Start returns the harness cfg configures in the process env: connected
// as the harness, its metrics in the process's registry.
func Start(ctx context.Context, cfg Config, env *process.Env) (*Service, error) {
	js, err := env.Join(ctx, "harness")
	if err != nil {
		return nil, err
	}
	cfg.Metrics = env.Metrics
	return New(ctx, cfg, js, env.Log)
}

// New returns a harness using js, whose streams and buckets [bus.Setup] has
// created.
func New(ctx context.Context, cfg Config, js jetstream.JetStream, log *slog.Logger) (*Service, error) {
	leases, err := js.KeyValue(ctx, bus.BucketLeases)
	if err != nil {
		return nil, err
	}
	usage, err := js.KeyValue(ctx, bus.BucketUsage)
	if err != nil {
		return nil, err
	}
	skills, err := js.ObjectStore(ctx, bus.BucketSkills)
	if err != nil {
		return nil, err
	}
	environments, err := js.KeyValue(ctx, bus.BucketEnvironments)
	if err != nil {
		return nil, err
	}
	days, err := newDayUsages(usage, cfg.Policy)
	if err != nil {
		return nil, err
	}
	// Bounded, the least recently used key forgotten: it is read again
	// when next needed.
	counted, err := lru.New[string, countedUsage](10000)
	if err != nil {
		return nil, err
	}
	log = log.With("service", "harness")
	if cfg.Metrics != nil {
		if err := sessionlog.Register(cfg.Metrics); err != nil {
			return nil, err
		}
	}
	index, err := newSkillIndex(skills, log)
	if err != nil {
		return nil, err
	}
	s := &Service{
		skills:       index,
		environments: environments,
		cfg:          cfg,
		logs: sessionlog.New(js, sessionlog.Options{
			As: sessionlog.Harness, Reader: "harness", DeadLetters: true, Logger: log,
			IDKey: eventIDKey(cfg.CallKey),
		}),
		js:        js,
		providers: cfg.Providers(),
		leases:    sessionLeases(leases),
		freed:     freedLeases{max: maxFreed},
		days:      days,
		log:       log,
		admission: &lock.Gate{Size: cfg.Concurrency, PerGroup: cfg.TenantConcurrency},
		metrics:   newMetrics(cfg.Metrics),
	}
	s.counter = &usageCounter{
		js:      js,
		logs:    s.logs,
		usage:   usage,
		leases:  sessionLeases(leases),
		me:      []byte(cfg.Instance),
		log:     log,
		price:   days.price,
		read:    days.read,
		counted: counted,
	}
	return s, nil
}

// stepAckWait is how long the server waits for the ack of a request or a
// step before it gives the message to another harness, should this one
// have died; in-progress acks, every third of it, keep a long step's
// message here. The other harness then takes the session's lease at once
// (see askFree), so a killed harness's sessions go on within a second.
const stepAckWait = 500 * time.Millisecond

// eventIDKey is the key of the message IDs of the events the harness
// writes (see [sessionlog.Options.IDKey]), drawn from its call-signing
// key, which every harness of a deployment holds and no other service
// does: another service cannot take the ID of a harness's next event
// first, and have it dropped as a duplicate.
func eventIDKey(callKey ed25519.PrivateKey) []byte {
	return sessionlog.IDKeyFrom("corral event message IDs", callKey)
}

// maxRequestsWaiting bounds the requests of one session that wait in a
// harness for its turn (a follow-up waits while the session's step asks
// the model): one more is refused as busy, and dead-lettered with the
// reason, rather than kept pending (see [bus.Consumer.MaxKeyWaiting]).
const maxRequestsWaiting = 8

// requestsPending bounds the requests a harness holds at once, running or
// waiting for their session or tenant: with room for many, one tenant's
// sessions, each with its requests waiting, leave the server room to
// deliver another tenant's.
func requestsPending(concurrency int) int { return max(1024, 16*concurrency) }

// Run consumes requests and session events until ctx is done, then drains.
func (s *Service) Run(ctx context.Context) error {
	// Another harness takes a lease at once from a harness that does not
	// answer for it (see askFree): this one answers from before its first
	// step until after its last.
	leaseRequests, err := s.answerLeaseRequests(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = leaseRequests.Unsubscribe() }()
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return bus.Consume(ctx, s.js, bus.Consumer{
			Stream: bus.StreamRequests,
			Config: jetstream.ConsumerConfig{
				Durable:       bus.ConsumerHarnessRequests,
				FilterSubject: "requests.>",
				AckWait:       stepAckWait,
				MaxAckPending: requestsPending(s.cfg.Concurrency),
			},
			Concurrency:   s.cfg.Concurrency,
			MaxKeyWaiting: maxRequestsWaiting,
			Admit:         admitRequest,
			Gate:          s.admission,
			Handler:       s.handleRequest,
			OnGiveUp:      s.refuseRequest,
			RetryDelay:    s.cfg.RetryDelay,
			Grace:         s.cfg.ShutdownGrace,
			Logger:        s.log,
		})
	})
	g.Go(func() error {
		return bus.Consume(ctx, s.js, bus.Consumer{
			Stream: bus.StreamEvents,
			Config: jetstream.ConsumerConfig{
				Durable: bus.ConsumerHarnessSteps,
				AckWait: stepAckWait,
				FilterSubjects: []string{
					sessionlog.KindFilter(event.TypeSessionRequested),
					sessionlog.KindFilter(event.TypeToolCompleted),
					sessionlog.KindFilter(event.TypeApprovalDecided),
				},
			},
			Concurrency: s.cfg.Concurrency,
			// A session's steps and requests wait for each other without
			// a slot.
			Admit:      bus.BySession,
			Gate:       s.admission,
			Timeout:    15 * time.Minute,
			Handler:    s.handleStep,
			OnGiveUp:   s.failSession(event.CodePoison),
			RetryDelay: s.cfg.RetryDelay,
			Grace:      s.cfg.ShutdownGrace,
			Logger:     s.log,
		})
	})
	g.Go(func() error { return s.counter.run(ctx) })
	g.Go(func() error { return s.watchWallTime(ctx) })
	g.Go(func() error { return s.skills.run(ctx) })
	g.Go(func() error { return s.serveLeases(ctx) })
	s.log.InfoContext(ctx, "harness started", "version", version.String(), "instance", s.cfg.Instance, "default_model", s.cfg.DefaultModel)
	if all, _ := parseSpeedups("all"); s.cfg.Speedups != all {
		s.log.InfoContext(ctx, "some speed-ups are off", "speedups", fmt.Sprintf("%+v", s.cfg.Speedups))
	}
	if s.providers.OpenAI == nil && s.providers.Anthropic == nil {
		// Info, not a warning: corral dev's banner says it, and a
		// deployment's start log shows it.
		s.log.InfoContext(ctx, "no model provider configured: sessions will fail until ANTHROPIC_API_KEY or OPENAI_API_KEY (or OPENAI_BASE_URL) is set")
	}
	return g.Wait()
}

// refuseRequest records why a request was refused as the failure of the
// session it would have started. A refused follow-up leaves its session as
// it is (the dead letter keeps the request and the reason).
func (s *Service) refuseRequest(ctx context.Context, m bus.Msg, reason error) error {
	tenant, session, err := bus.ParseSubject(m.Subject)
	if err != nil || event.CheckTenant(tenant) != nil {
		return nil
	}
	evs, _, err := s.logs.ReadAll(ctx, tenant, session)
	if err != nil {
		return err
	}
	if len(evs) > 0 {
		return nil
	}
	return s.recordFailure(ctx, tenant, session, event.CodeInvalidRequest, withoutClass(reason).Error(), "refused:"+m.MsgID)
}

// withoutClass returns what a [bus.Permanent] error wraps: the requester
// wants to know what is wrong, not how the consumer classed it.
func withoutClass(err error) error {
	if u, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range u.Unwrap() {
			if !errors.Is(e, bus.ErrPermanent) {
				return e
			}
		}
	}
	return err
}

// failSession returns a give-up hook recording a failure in the session the
// message's subject names, so the requester learns why nothing happened.
func (s *Service) failSession(code string) func(ctx context.Context, m bus.Msg, reason error) error {
	return func(ctx context.Context, m bus.Msg, reason error) error {
		tenant, session, err := bus.ParseSubject(m.Subject)
		if err != nil || event.CheckTenant(tenant) != nil {
			return nil // nowhere to record it; the dead letter keeps it
		}
		return s.recordFailure(ctx, tenant, session, code, reason.Error(), fmt.Sprintf("giveup:%d", m.StreamSeq))
	}
}

func (s *Service) recordFailure(ctx context.Context, tenant string, session uuid.UUID, code, reason, msgID string) error {
	ev := event.SessionFailed{Header: event.NewHeader(event.TypeSessionFailed, tenant, session), Code: code, Reason: reason}
	if err := s.record(ctx, &ev, session.String()+":failed:"+msgID); err != nil {
		return err
	}
	s.metrics.ended.WithLabelValues(code).Inc()
	return nil
}

// fail records that st's session failed, as recordFailure does, and folds
// the failure into st, so that the step ends the session here too: its
// state is kept as failed and its lease does not linger.
func (s *Service) fail(ctx context.Context, st *state, code, reason string) error {
	ev := event.SessionFailed{Header: event.NewHeader(event.TypeSessionFailed, st.Tenant, st.Session), Code: code, Reason: reason}
	if err := s.append(ctx, st, &ev, st.Session.String()+":failed:"+st.failureID()); err != nil {
		return err
	}
	s.metrics.ended.WithLabelValues(code).Inc()
	return nil
}

// record appends an event to its session's log, deduplicated by msgID; an
// event recorded already counts as recorded.
func (s *Service) record(ctx context.Context, ev event.Event, msgID string) error {
	if err := s.logs.Record(ctx, ev, msgID); err != nil && !errors.Is(err, sessionlog.ErrDuplicate) {
		return err
	}
	return nil
}
