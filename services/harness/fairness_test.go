package harness

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"
	"time"

	"github.com/google/uuid"

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
