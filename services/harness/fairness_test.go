package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/sessionlog"
)

// One tenant's sessions take at most its share of the harness's slots:
// with two slots and a share of one, another tenant's session completes
// while two of the first tenant's wait for the model.
func TestTenantShare(t *testing.T) {
	_, _, js := natstest.Run(t)
	fake := modeltest.New(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
		return modeltest.Turn{Text: "done"}, nil
	})
	// The model keeps every request of a "slow" session waiting until
	// the test ends.
	release, slow := make(chan struct{}), make(chan struct{}, 8)
	model := blockingModel(t, fake.URL(), func(body []byte) bool { return bytes.Contains(body, []byte(`"slow"`)) }, slow, release)
	runHarnessWith(t, js, fake, map[string]string{
		"OPENAI_BASE_URL":                   model,
		"CORRAL_HARNESS_CONCURRENCY":        "2",
		"CORRAL_HARNESS_TENANT_CONCURRENCY": "1",
	})
	// Before the harness stops: its steps wait for the model.
	t.Cleanup(func() { close(release) })

	send := func(tenant, prompt string) uuid.UUID {
		session := uuid.Must(uuid.NewV7())
		req := event.Request{Header: event.NewHeader(event.TypeRequest, tenant, session), User: "ada", Prompt: prompt}
		if err := bus.Publish(context.Background(), js, bus.RequestSubject(tenant, session, req.User), req.ID.String(), &req); err != nil {
			t.Fatal(err)
		}
		return session
	}
	send("acme", "slow")
	<-slow
	send("acme", "slow")
	quick := send("beta", "quick")
	natstest.WaitFor(t, 10*time.Second, func() error {
		msgs, err := bus.ReadAll(context.Background(), js, bus.StreamEvents, sessionlog.SessionKind("beta", quick, event.TypeSessionCompleted))
		if err != nil || len(msgs) == 0 {
			return fmt.Errorf("beta's session not completed (%v)", err)
		}
		return nil
	})
	// The first tenant's second session waits for its share.
	select {
	case <-slow:
		t.Error("acme's second session asked the model while its first did")
	default:
	}
}

// Follow-ups sent to a session while its model turn runs wait for it in
// the harness, each still pending on the server, which delivers a
// harness a bounded number: a flood of them to one session would take
// them all, and no other tenant's request would be delivered until the
// turn ended. At most maxRequestsWaiting wait; the rest are refused at
// once, dead-lettered as busy. Another tenant's session completes while
// the flood's session still asks the model, and the follow-ups kept are
// recorded once it answers.
func TestFollowUpFloodLeavesOtherTenants(t *testing.T) {
	_, _, js := natstest.Run(t)
	fake := modeltest.New(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
		return modeltest.Turn{Text: "done"}, nil
	})
	release, slow := make(chan struct{}), make(chan struct{}, 64)
	model := blockingModel(t, fake.URL(), func(body []byte) bool { return bytes.Contains(body, []byte(`"slow"`)) }, slow, release)
	const concurrency = 4
	runHarnessWith(t, js, fake, map[string]string{
		"OPENAI_BASE_URL":            model,
		"CORRAL_HARNESS_CONCURRENCY": fmt.Sprint(concurrency),
	})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	ctx := context.Background()
	publish := func(tenant, user string, session uuid.UUID, prompt string) {
		req := event.Request{Header: event.NewHeader(event.TypeRequest, tenant, session), User: user, Prompt: prompt}
		data, err := json.Marshal(&req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.PublishAsync(bus.RequestSubject(tenant, session, user), data, jetstream.WithMsgID(req.ID.String())); err != nil {
			t.Fatal(err)
		}
	}
	flooded := uuid.Must(uuid.NewV7())
	publish("acme", "mallory", flooded, "slow")
	<-slow
	// More than the harness may hold pending at once.
	flood := requestsPending(concurrency) + 16
	for range flood {
		publish("acme", "mallory", flooded, "again")
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		t.Fatal("the flood was not stored")
	}
	quick := uuid.Must(uuid.NewV7())
	publish("beta", "ada", quick, "quick")
	natstest.WaitFor(t, time.Minute, func() error {
		msgs, err := bus.ReadAll(ctx, js, bus.StreamEvents, sessionlog.SessionKind("beta", quick, event.TypeSessionCompleted))
		if err != nil || len(msgs) == 0 {
			pending := -1
			if c, err := js.Consumer(ctx, bus.StreamRequests, bus.ConsumerHarnessRequests); err == nil {
				pending = c.CachedInfo().NumAckPending
			}
			return fmt.Errorf("beta's session not completed (%v); the harness holds %d requests pending", err, pending)
		}
		return nil
	})
	natstest.WaitFor(t, time.Minute, func() error {
		dead := natstest.DeadLetters(t, js, "deadletter."+bus.StreamRequests+".>")
		if want := flood - maxRequestsWaiting; len(dead) != want {
			return fmt.Errorf("%d requests dead-lettered, want %d", len(dead), want)
		}
		if reason := dead[0].Reason; !strings.Contains(reason, "busy: 8 messages of acme.") {
			return fmt.Errorf("dead-lettered for %q, want busy", reason)
		}
		return nil
	})
	once.Do(func() { close(release) })
	natstest.WaitFor(t, time.Minute, func() error {
		msgs, err := bus.ReadAll(ctx, js, bus.StreamEvents, sessionlog.SessionKind("acme", flooded, event.TypeSessionRequested))
		if err != nil || len(msgs) != 1+maxRequestsWaiting {
			return fmt.Errorf("%d requests of the flooded session recorded, want %d (%v)", len(msgs), 1+maxRequestsWaiting, err)
		}
		return nil
	})
}

// blockingModel returns the URL of a proxy to the fake model at target
// that holds each request whose body blocks says so, after telling asked,
// until release is closed.
func blockingModel(t *testing.T, target string, blocks func(body []byte) bool, asked chan<- struct{}, release <-chan struct{}) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if blocks(body) {
			asked <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(model.Close)
	return model.URL
}
