package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/logtest"
	"corral.dev/pkg/model"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/policy"
	"corral.dev/pkg/sessionindex"
	"corral.dev/pkg/sessionlog"
)

// newIndexer returns a gateway on a fresh embedded server, with its
// buckets, and a Log that records events as the harness.
func newIndexer(t *testing.T) (*Service, jetstream.JetStream, *sessionlog.Log) {
	t.Helper()
	_, _, js := natstest.Run(t)
	ctx := context.Background()
	if err := Setup(ctx, js); err != nil {
		t.Fatal(err)
	}
	s, err := New(ctx, Config{Prices: policy.Default(), Concurrency: 4, Webhooks: WebhookConfig{Key: testWebhookKey}}, js, nil, slog.New(slog.NewTextHandler(&logtest.Buffer{}, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return s, js, sessionlog.New(js, sessionlog.Options{As: sessionlog.Harness})
}

func record(t *testing.T, l *sessionlog.Log, ev event.Event) {
	t.Helper()
	if err := l.Record(context.Background(), ev, ev.Head().ID.String()); err != nil {
		t.Fatal(err)
	}
}

func entry(s *Service, tenant string, session uuid.UUID) (sessionindex.Entry, error) {
	kve, err := s.sessions.Get(context.Background(), sessionindex.Key(tenant, session))
	if err != nil {
		return sessionindex.Entry{}, err
	}
	var e sessionindex.Entry
	return e, json.Unmarshal(kve.Value(), &e)
}

// TestIndexFollowsTheLogs runs the gateway's index over sessions recorded
// as the harness records them: each session's entry follows its log, a
// forged event (a lifecycle event written as the sandbox-manager) changes
// nothing, and a session only forged events name gets no entry.
func TestIndexFollowsTheLogs(t *testing.T) {
	t.Parallel()
	s, js, harness := newIndexer(t)
	natstest.Serve(t, s.Run)
	acme, initech := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	record(t, harness, &event.SessionRequested{Header: event.NewHeader(event.TypeSessionRequested, "acme", acme), Request: uuid.New(), User: "ada", Model: "openai:m", Prompt: "fix the tests\nplease"})
	record(t, harness, &event.ModelResponded{Header: event.NewHeader(event.TypeModelResponded, "acme", acme), Turn: 1, Model: "openai:m", Usage: model.Usage{InputTokens: 1000, OutputTokens: 100}})
	// The sandbox-manager may write results, not a session's end.
	natstest.Forge(t, js, sessionlog.Subject("acme", acme, event.TypeSessionCompleted, sessionlog.Sandbox),
		&event.SessionCompleted{Header: event.NewHeader(event.TypeSessionCompleted, "acme", acme), Answer: "forged"})
	natstest.Forge(t, js, sessionlog.Subject("initech", initech, event.TypeSessionRequested, sessionlog.Sandbox),
		&event.SessionRequested{Header: event.NewHeader(event.TypeSessionRequested, "initech", initech), User: "mallory", Prompt: "forged"})
	record(t, harness, &event.ApprovalRequested{Header: event.NewHeader(event.TypeApprovalRequested, "acme", acme), Call: uuid.New(), Tool: "Bash"})

	natstest.WaitFor(t, 10*time.Second, func() error {
		e, err := entry(s, "acme", acme)
		if err != nil {
			return err
		}
		want := policy.Default().Cost("openai:m", model.Usage{InputTokens: 1000, OutputTokens: 100})
		if e.User != "ada" || e.Status != sessionindex.Waiting || e.Turns != 1 || e.Title != "fix the tests" || e.CostUSD != want || len(e.Held) != 1 {
			return fmt.Errorf("entry %+v", e)
		}
		return nil
	})
	// Everything is indexed by now: the forged events came before the
	// last one recorded.
	if e, err := entry(s, "initech", initech); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("a session only forged events name is indexed: %+v (%v)", e, err)
	}
	if n := len(natstest.DeadLetters(t, js, "deadletter.EVENTS.>")); n != 2 {
		t.Errorf("%d dead letters, want the 2 forged events", n)
	}
}

// TestIndexFoldsWhatCameBefore hands the index a session's second event
// before its first, as a redelivery after a failure would: the entry has
// both, and the first, delivered after, is not folded twice.
func TestIndexFoldsWhatCameBefore(t *testing.T) {
	t.Parallel()
	s, js, harness := newIndexer(t)
	ctx := context.Background()
	id := uuid.Must(uuid.NewV7())
	record(t, harness, &event.SessionRequested{Header: event.NewHeader(event.TypeSessionRequested, "acme", id), Request: uuid.New(), User: "ada", Model: "openai:m", Prompt: "go"})
	record(t, harness, &event.ModelResponded{Header: event.NewHeader(event.TypeModelResponded, "acme", id), Turn: 1, Model: "openai:m", Usage: model.Usage{OutputTokens: 7}})
	msgs, err := bus.ReadAll(ctx, js, bus.StreamEvents, bus.SessionEvents("acme", id))
	if err != nil || len(msgs) != 2 {
		t.Fatalf("read the log: %d, %v", len(msgs), err)
	}
	for _, m := range []bus.Msg{msgs[1], msgs[0], msgs[1]} {
		if err := s.fold(ctx, m); err != nil {
			t.Fatalf("fold %s: %v", m.Subject, err)
		}
	}
	e, err := entry(s, "acme", id)
	if err != nil {
		t.Fatal(err)
	}
	if e.Requests != 1 || e.Turns != 1 || e.OutputTokens != 7 || e.Seq != msgs[1].StreamSeq {
		t.Errorf("entry %+v, want one request and one turn, folded to sequence %d", e, msgs[1].StreamSeq)
	}
}
