// Package approval is Corral's approval service. It keeps every call a
// policy holds for a person's approval, shows them to reviewers (a web page
// and the CLI's API), and records each decision, signed, in the session's
// log: the only place the harness takes decisions from.
package approval

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/model"
	"corral.dev/pkg/policy"
	"corral.dev/pkg/process"
	"corral.dev/pkg/sessionlog"
	"corral.dev/pkg/snapshot"
	"corral.dev/pkg/version"
)

// Service is the approval service.
type Service struct {
	cfg Config
	js  jetstream.JetStream
	kv  jetstream.KeyValue
	// creds is the credentials bucket, which reviewers sign in to the
	// page with.
	creds jetstream.KeyValue
	log   *slog.Logger
	// logs reads the session logs, judging every event, and records
	// decisions as the approval service.
	logs *sessionlog.Log
	// console reads the session logs for the sessions console: judged as
	// logs is, but a rejected event is only left out (the consumers
	// dead-letter it), not dead-lettered again on every page view.
	console *sessionlog.Log
	// snapshots reads the sessions' workspace snapshots, for the
	// console; nil when the deployment keeps none.
	snapshots *snapshot.Reader
	// index is the session index as last watched, for the console; nil
	// when the server has no index (no gateway was ever set up).
	index *index

	// mu guards items, the bucket as last watched, and changed, closed
	// and replaced on every change so that watchers of the page wake.
	mu      sync.Mutex
	items   map[string]*Approval
	changed chan struct{}
	synced  chan struct{}
	// decisions counts decisions by verdict.
	decisions *prometheus.CounterVec
}

// Start returns the approval service cfg configures in the process env:
// connected as the approval service, its metrics in the process's
// registry.
func Start(ctx context.Context, cfg Config, env *process.Env) (*Service, error) {
	js, err := env.Join(ctx, "approval")
	if err != nil {
		return nil, err
	}
	cfg.Metrics = env.Metrics
	return New(ctx, cfg, js, env.Log)
}

// New returns an approval service using js, whose streams and buckets
// [bus.Setup] has created.
func New(ctx context.Context, cfg Config, js jetstream.JetStream, log *slog.Logger) (*Service, error) {
	kv, err := js.KeyValue(ctx, bus.BucketApprovals)
	if err != nil {
		return nil, fmt.Errorf("open kv %s: %w", bus.BucketApprovals, err)
	}
	creds, err := js.KeyValue(ctx, bus.BucketCredentials)
	if err != nil {
		return nil, fmt.Errorf("open kv %s: %w", bus.BucketCredentials, err)
	}
	log = log.With("service", "approval")
	s := &Service{
		cfg:   cfg,
		js:    js,
		kv:    kv,
		creds: creds,
		log:   log,
		logs: sessionlog.New(js, sessionlog.Options{
			As: sessionlog.Approval, Reader: "approval", DeadLetters: true, Logger: log,
			// Its decisions' IDs (<call>:decided) keyed from its signing
			// key: a service that saw the call's ID in the log cannot
			// store something under a decision's ID first and have the
			// decision dropped.
			IDKey: sessionlog.IDKeyFrom("corral approval decision message IDs", cfg.SigningKey),
		}),
		console: sessionlog.New(js, sessionlog.Options{Reader: "approval-console", Logger: log}),
		items:   make(map[string]*Approval),
		changed: make(chan struct{}),
		synced:  make(chan struct{}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "corral_approval_decisions_total",
			Help: "Decisions made, by verdict (approved, denied; expired ones are denied by corral).",
		}, []string{"verdict"}),
	}
	if cfg.Prices == nil {
		s.cfg.Prices = policy.Default()
	}
	if s.index, err = openIndex(ctx, js); err != nil {
		return nil, err
	}
	switch s.snapshots, err = snapshot.NewReader(ctx, js, s.console); {
	case errors.Is(err, jetstream.ErrBucketNotFound):
		s.snapshots = nil
	case err != nil:
		return nil, err
	}
	pending := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "corral_approval_pending",
		Help: "Approvals waiting for a reviewer.",
	}, func() float64 { return float64(len(s.list("", Pending))) })
	reg := cfg.Metrics
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	for _, c := range []prometheus.Collector{s.decisions, pending} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	if err := sessionlog.Register(reg); err != nil {
		return nil, err
	}
	return s, nil
}

// Run consumes approval requests and session ends, expires approvals,
// serves the CLI's API and the reviewers' page until ctx is done.
func (s *Service) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.watch(ctx) })
	if s.index != nil {
		g.Go(func() error { return s.index.watch(ctx, s.log) })
	}
	g.Go(func() error {
		return bus.Consume(ctx, s.js, bus.Consumer{
			Stream: bus.StreamEvents,
			Config: jetstream.ConsumerConfig{
				Durable: bus.ConsumerApprovals,
				FilterSubjects: []string{
					sessionlog.KindFilter(event.TypeApprovalRequested),
					sessionlog.KindFilter(event.TypeBudgetRaise),
					sessionlog.KindFilter(event.TypeSessionStopped),
					sessionlog.KindFilter(event.TypeSessionFailed),
					sessionlog.KindFilter(event.TypeSessionCompleted),
				},
			},
			Concurrency: s.cfg.Concurrency,
			Handler:     s.handle,
			Logger:      s.log,
		})
	})
	g.Go(func() error { return s.sweep(ctx) })
	g.Go(func() error { return s.serveAPI(ctx) })
	if s.cfg.Listen != "" {
		g.Go(func() error { return s.serveWeb(ctx) })
	}
	s.log.InfoContext(ctx, "approval started", "version", version.String(), "listen", s.cfg.Listen, "timeout", s.cfg.Timeout)
	return g.Wait()
}

// watch keeps items in step with the bucket, whichever instance wrote it,
// and wakes the page's live updates on every change.
func (s *Service) watch(ctx context.Context) error {
	for ctx.Err() == nil {
		w, err := s.kv.WatchAll(ctx)
		if err != nil {
			s.log.WarnContext(ctx, "watch approvals", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		for e := range w.Updates() {
			if e == nil { // the initial values are in
				s.mu.Lock()
				select {
				case <-s.synced:
				default:
					close(s.synced)
				}
				s.mu.Unlock()
				continue
			}
			s.mu.Lock()
			if e.Operation() == jetstream.KeyValuePut {
				var a Approval
				if err := json.Unmarshal(e.Value(), &a); err == nil {
					s.items[e.Key()] = &a
				}
			} else {
				delete(s.items, e.Key())
			}
			close(s.changed)
			s.changed = make(chan struct{})
			s.mu.Unlock()
		}
		_ = w.Stop()
	}
	return nil
}

// list returns the approvals as last watched, newest first, of tenant
// ("" for every tenant) with one of statuses (none for all).
func (s *Service) list(tenant string, statuses ...string) []*Approval {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*Approval
	for _, a := range s.items {
		if (tenant == "" || a.Tenant == tenant) && (len(statuses) == 0 || slices.Contains(statuses, a.Status)) {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b *Approval) int { return b.RequestedAt.Compare(a.RequestedAt) })
	return out
}

// updates returns a channel closed at the next change of the approvals.
func (s *Service) updates() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// handle takes one event of the kinds the service consumes. Each is
// judged first, by where it is and who wrote it (see [sessionlog]): tenant
// and session are the subject's, never the body's. A rejected event is
// returned as it is, so that it is dead-lettered and nothing is kept.
func (s *Service) handle(ctx context.Context, m bus.Msg) error {
	en, err := s.logs.Judge(ctx, m) // a large Write is offloaded: Judge resolves it
	if err != nil {
		return err
	}
	switch e := en.Event.(type) {
	case *event.ApprovalRequested:
		return s.askCall(ctx, en, e)
	case *event.BudgetRaise:
		return s.askRaise(ctx, en, e)
	case *event.SessionStopped:
		return s.cancel(ctx, en.Tenant, en.Session, true)
	case *event.SessionFailed, *event.SessionCompleted:
		return s.cancel(ctx, en.Tenant, en.Session, false)
	}
	return nil
}

// askCall keeps a call the harness holds for a reviewer. The service signs
// only what it shows: the hash a decision carries is computed here from the
// tool and input on the page, and a request carrying another one (asking
// about one command and showing another) is refused.
func (s *Service) askCall(ctx context.Context, en sessionlog.Entry, e *event.ApprovalRequested) error {
	hash := event.ArgsHash(e.Tool, e.Input)
	if e.ArgsHash != hash {
		return sessionlog.Reject(sessionlog.ReasonHash, "approval request for call %s carries args_hash %q, but the %s input it shows hashes to %q", e.Call, e.ArgsHash, e.Tool, hash)
	}
	return s.ask(ctx, &Approval{
		ID: e.Call, Tenant: en.Tenant, Session: en.Session, Turn: e.Turn, User: e.User,
		Tool: e.Tool, Input: e.Input, ArgsHash: hash, Rule: e.Rule, Why: e.Reason, Preview: e.Preview,
		RequestedAt: e.Time, Status: Pending,
	})
}

// askRaise keeps a raise of a session's caps for a reviewer. Only the
// session's own user may ask for one: the harness records a raise only
// after checking that, and this checks it again against the session's
// first request, so that a raise recorded for anyone else is refused.
func (s *Service) askRaise(ctx context.Context, en sessionlog.Entry, e *event.BudgetRaise) error {
	first, found, err := s.logs.First(ctx, en.Tenant, en.Session, event.TypeSessionRequested)
	if err != nil {
		return err
	}
	if !found {
		return sessionlog.Reject(sessionlog.ReasonWriter, "a raise in session %s of tenant %s, which has no request", en.Session, en.Tenant)
	}
	if owner := first.Event.(*event.SessionRequested).User; e.User != owner {
		return sessionlog.Reject(sessionlog.ReasonWriter, "a raise asked by %q in a session of %q", e.User, owner)
	}
	return s.ask(ctx, &Approval{
		ID: e.Raise, Tenant: en.Tenant, Session: en.Session, User: e.User,
		Tool: event.BudgetTool, Input: e.Limits, ArgsHash: event.ArgsHash(event.BudgetTool, e.Limits),
		Rule: "budget-raise", Why: cmp.Or(e.Reason, "no reason given"),
		RequestedAt: e.Time, Status: Pending,
	})
}

// ask keeps a new approval, with its session's context.
func (s *Service) ask(ctx context.Context, a *Approval) error {
	if s.cfg.Timeout > 0 {
		t := a.RequestedAt.Add(s.cfg.Timeout)
		a.ExpiresAt = &t
	}
	if _, err := s.kv.Get(ctx, key(a.Tenant, a.Session, a.ID)); err == nil {
		return nil // a redelivery
	}
	if err := s.addContext(ctx, a); err != nil {
		return err
	}
	data, err := json.Marshal(a)
	if err != nil {
		return err
	}
	if _, err := s.kv.Create(ctx, key(a.Tenant, a.Session, a.ID), data); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("keep approval %s: %w", a.ID, err)
	}
	s.log.InfoContext(ctx, "approval requested", "id", a.ID, "tenant", a.Tenant, "session", a.Session, "tool", a.Tool, "rule", a.Rule)
	return nil
}

// maxSteps is how many of a session's last steps a reviewer sees.
const maxSteps = 5

// addContext reads what a reviewer needs from the session's log: the
// prompt it works on and its last steps. Only events the log accepts are
// shown.
func (s *Service) addContext(ctx context.Context, a *Approval) error {
	entries, _, err := s.logs.ReadAll(ctx, a.Tenant, a.Session)
	if err != nil {
		return err
	}
	var steps []Step
	at := map[uuid.UUID]int{}
	inputs := map[uuid.UUID]json.RawMessage{}
	for _, en := range entries {
		switch e := en.Event.(type) {
		case *event.SessionRequested:
			a.Prompt = e.Prompt
		case *event.SessionFailed:
			steps = append(steps, Step{Tool: "failed", Summary: e.Reason, IsError: true})
		case *event.SessionPaused:
			// What a reviewer asked for a raise decides on.
			steps = append(steps, Step{Tool: "paused", Summary: e.Reason, IsError: true})
		case *event.ModelResponded:
			for _, c := range e.Calls {
				inputs[c.ID] = e.Input(c)
			}
			if t := (model.Response{Content: e.Content}).Text(); t != "" {
				steps = append(steps, Step{Tool: "model", Summary: clip(t, 300)})
			}
			for _, d := range e.Dispatches() {
				at[d.Call] = len(steps)
				steps = append(steps, Step{Tool: d.Name, Summary: clip(string(inputs[d.Call]), 300)})
			}
		case *event.ToolDispatched:
			at[e.Call] = len(steps)
			steps = append(steps, Step{Tool: e.Name, Summary: clip(string(inputs[e.Call]), 300)})
		case *event.ToolCompleted:
			i, ok := at[e.Call]
			if !ok {
				at[e.Call] = len(steps)
				steps = append(steps, Step{Tool: e.Name, Summary: clip(string(inputs[e.Call]), 300)})
				i = len(steps) - 1
			}
			steps[i].Result, steps[i].IsError = clip(e.Output, 500), e.IsError
		}
	}
	if len(steps) > maxSteps {
		steps = steps[len(steps)-maxSteps:]
	}
	a.Steps = steps
	return nil
}

func clip(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	r := []rune(s[:n])
	return string(r[:len(r)-1]) + "…"
}

// cancel marks the pending call approvals of a session that ended (was
// stopped, when stopped is set) as cancelled.
func (s *Service) cancel(ctx context.Context, tenant string, session uuid.UUID, stopped bool) error {
	keys, err := s.kv.ListKeysFiltered(ctx, fmt.Sprintf("%s.%s.*", tenant, session))
	if err != nil {
		return fmt.Errorf("list approvals of %s: %w", session, err)
	}
	for k := range keys.Keys() {
		_, err := s.update(ctx, k, func(a *Approval) error {
			// A raise of the caps is asked for a session that ended, to
			// go on: it stays. So does a request egress held (a push),
			// which the model retries in a later turn, unless the
			// session was stopped.
			if a.Status != Pending || a.Tool == event.BudgetTool || a.Tool == event.EgressTool && !stopped {
				return errUnchanged
			}
			a.Status, a.DecidedAt, a.Published = Cancelled, time.Now().UTC(), true
			return nil
		})
		if err != nil && !errors.Is(err, errUnchanged) {
			return err
		}
	}
	return nil
}

// update applies fn to the approval under k and stores it if fn returns
// nil, retrying when someone else changed it in between.
func (s *Service) update(ctx context.Context, k string, fn func(a *Approval) error) (*Approval, error) {
	for {
		e, err := s.kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, ErrNotFound
		}
		if err != nil {
			return nil, err
		}
		var a Approval
		if err := json.Unmarshal(e.Value(), &a); err != nil {
			return nil, fmt.Errorf("approval %s: %w", k, err)
		}
		if err := fn(&a); err != nil {
			return &a, err
		}
		data, err := json.Marshal(&a)
		if err != nil {
			return nil, err
		}
		_, err = s.kv.Update(ctx, k, data, e.Revision())
		if bus.Conflict(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("store approval %s: %w", k, err)
		}
		return &a, nil
	}
}

// errUnchanged tells [Service.update] there is nothing to store.
var errUnchanged = errors.New("unchanged")

// find returns the bucket key of the approval ref names. An ID found in
// more than one tenant is refused whatever else ref names: one tenant's
// session and raise IDs may be another's, and a decision meant for one
// must never land on the other.
func (s *Service) find(ctx context.Context, ref Ref) (string, error) {
	tenant, session := "*", "*"
	if ref.Tenant != "" {
		if event.CheckTenant(ref.Tenant) != nil {
			return "", ErrNotFound // and no wildcard in the filter
		}
		tenant = ref.Tenant
	}
	if ref.Session != uuid.Nil {
		session = ref.Session.String()
	}
	keys, err := s.kv.ListKeysFiltered(ctx, tenant+"."+session+"."+ref.ID.String())
	if err != nil {
		return "", err
	}
	var found []string
	tenants := map[string]bool{}
	for k := range keys.Keys() {
		found = append(found, k)
		t, _, _ := strings.Cut(k, ".")
		tenants[t] = true
	}
	switch {
	case len(found) == 0:
		return "", ErrNotFound
	case len(tenants) > 1:
		return "", fmt.Errorf("%w: it is in more than one tenant", ErrAmbiguous)
	case len(found) > 1:
		return "", fmt.Errorf("%w: it is in more than one session: name the session too", ErrAmbiguous)
	}
	return found[0], nil
}

// Decide records reviewer's decision on the approval ref names: approved
// or not, with a reason, signed. A decision on an approval no longer
// pending returns a [*DecidedError] saying who decided it.
func (s *Service) Decide(ctx context.Context, ref Ref, approve bool, reviewer, reason string) (*Approval, error) {
	if strings.TrimSpace(reviewer) == "" {
		return nil, errors.New("a decision needs a reviewer's name")
	}
	k, err := s.find(ctx, ref)
	if err != nil {
		return nil, err
	}
	a, err := s.update(ctx, k, func(a *Approval) error {
		if a.Status != Pending {
			return &DecidedError{a}
		}
		a.Status, a.Reviewer, a.Reason, a.DecidedAt = Denied, reviewer, reason, time.Now().UTC()
		if approve {
			a.Status = Approved
		}
		d := &event.ApprovalDecided{
			Header:   event.NewHeader(event.TypeApprovalDecided, a.Tenant, a.Session),
			Call:     a.ID,
			ArgsHash: a.ArgsHash,
			Approved: approve,
			Reviewer: reviewer,
			Reason:   reason,
		}
		d.Sign(s.cfg.SigningKey)
		a.Decision = d
		return nil
	})
	if err != nil {
		return a, err
	}
	s.log.InfoContext(ctx, "approval decided", "id", a.ID, "status", a.Status, "reviewer", reviewer)
	s.decisions.WithLabelValues(a.Status).Inc()
	return a, s.publish(ctx, a)
}

// publish records a's decision, as signed when it was made, in its
// session's log, and notes that it did. A decision stored but not yet
// published (the service died in between) is published by the sweep. An
// entry whose decision does not verify was not written by this service,
// and nothing is published for it.
func (s *Service) publish(ctx context.Context, a *Approval) error {
	d := a.Decision
	pub := s.cfg.SigningKey.Public().(ed25519.PublicKey)
	if d == nil || d.Verify(pub, a.Tenant, a.Session, a.ID, a.ArgsHash) != nil || d.Approved != (a.Status == Approved) {
		return fmt.Errorf("approval %s: its decision is not one this service signed: not published", a.ID)
	}
	if err := s.logs.Record(ctx, d, a.ID.String()+":decided"); err != nil && !errors.Is(err, sessionlog.ErrDuplicate) {
		return fmt.Errorf("publish decision on %s: %w", a.ID, err)
	}
	_, err := s.update(ctx, key(a.Tenant, a.Session, a.ID), func(a *Approval) error {
		if a.Published {
			return errUnchanged
		}
		a.Published = true
		return nil
	})
	if err != nil && !errors.Is(err, errUnchanged) {
		return err
	}
	return nil
}

// sweep denies approvals left undecided past their expiry and publishes
// decisions kept but not yet published.
func (s *Service) sweep(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-s.synced:
	}
	t := time.NewTicker(s.cfg.Sweep)
	defer t.Stop()
	for {
		now := time.Now()
		for _, a := range s.list("", Pending, Approved, Denied) {
			var err error
			switch {
			case a.Status == Pending && a.ExpiresAt != nil && now.After(*a.ExpiresAt):
				reason := fmt.Sprintf("no reviewer decided within %s", s.cfg.Timeout)
				_, err = s.Decide(ctx, Ref{ID: a.ID, Tenant: a.Tenant, Session: a.Session}, false, "corral", reason)
			case a.Status != Pending && !a.Published:
				err = s.publish(ctx, a)
			}
			var decided *DecidedError
			if err != nil && !errors.As(err, &decided) && ctx.Err() == nil {
				s.log.WarnContext(ctx, "sweep approvals", "id", a.ID, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
