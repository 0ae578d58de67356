package gateway

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/logtest"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/policy"
	"corral.dev/pkg/sessionlog"
	"corral.dev/pkg/webhookapi"
)

// received is one POST a receiver took.
type received struct {
	id, ts  string
	payload webhookapi.Payload
	sigOK   bool
}

// receiver is a webhook receiver that checks each POST's signature with
// its own verifier (not the gateway's), and answers with what status says
// for the n-th POST (from 1) of a webhook-id.
type receiver struct {
	*httptest.Server
	secret string
	status func(got received, n int) int

	mu  sync.Mutex
	got []received
}

func newReceiver(t *testing.T, status func(got received, n int) int) *receiver {
	t.Helper()
	r := &receiver{status: status}
	r.Server = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	got := received{id: req.Header.Get("webhook-id"), ts: req.Header.Get("webhook-timestamp")}
	_ = json.Unmarshal(body, &got.payload)
	r.mu.Lock()
	got.sigOK = verify(r.secret, got.id, got.ts, body, req.Header.Get("webhook-signature"))
	r.got = append(r.got, got)
	n := 0
	for _, g := range r.got {
		if g.id == got.id {
			n++
		}
	}
	r.mu.Unlock()
	w.WriteHeader(r.status(got, n))
}

// verify checks a Standard Webhooks signature: one of the space-separated
// "v1,<base64>" of sig is the HMAC-SHA256, keyed with the secret's
// base64 after "whsec_", of "id.ts.body", and ts is recent.
func verify(secret, id, ts string, body []byte, sig string) bool {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil || id == "" {
		return false
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || time.Since(time.Unix(sec, 0)).Abs() > 5*time.Minute {
		return false
	}
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%s.%s", id, ts, body)
	want := mac.Sum(nil)
	for _, s := range strings.Fields(sig) {
		v, b64, ok := strings.Cut(s, ",")
		got, err := base64.StdEncoding.DecodeString(b64)
		if ok && v == "v1" && err == nil && hmac.Equal(got, want) {
			return true
		}
	}
	return false
}

// posts returns what r took, in order.
func (r *receiver) posts() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// ids returns how many POSTs r took of each webhook-id.
func (r *receiver) ids() map[string]int {
	out := map[string]int{}
	for _, g := range r.posts() {
		out[g.id]++
	}
	return out
}

// testWebhookKey seals the webhooks' secrets of the tests' gateways.
var testWebhookKey = bytes.Repeat([]byte{9}, 32)

// webhookGateway starts a gateway on a fresh embedded server, private
// addresses allowed (the receivers are on loopback), and returns it with
// a Log that records events as the harness, and a way to start it again.
func webhookGateway(t *testing.T, cfg WebhookConfig) (js jetstream.JetStream, harness *sessionlog.Log, start func() (stop func())) {
	t.Helper()
	return webhookGatewayLog(t, cfg, &logtest.Buffer{})
}

// webhookGatewayLog is [webhookGateway] logging to log, debug included.
func webhookGatewayLog(t *testing.T, cfg WebhookConfig, log *logtest.Buffer) (js jetstream.JetStream, harness *sessionlog.Log, start func() (stop func())) {
	t.Helper()
	_, _, js = natstest.Run(t)
	ctx := context.Background()
	if err := Setup(ctx, js); err != nil {
		t.Fatal(err)
	}
	cfg.AllowPrivate = true
	if cfg.Key == nil {
		cfg.Key = testWebhookKey
	}
	start = func() func() {
		s, err := New(ctx, Config{Prices: policy.Default(), Concurrency: 4, Webhooks: cfg}, js, nil, slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug})))
		if err != nil {
			t.Fatal(err)
		}
		return natstest.Serve(t, s.Run)
	}
	return js, sessionlog.New(js, sessionlog.Options{As: sessionlog.Harness}), start
}

// webhookAPI asks the webhook API for op as tenant's reviewer (under the
// tenant's own scope), and fails the test on an error answer.
func webhookAPI(t *testing.T, js jetstream.JetStream, tenant, op string, req webhookapi.Request) webhookapi.Reply {
	t.Helper()
	b, _ := json.Marshal(req)
	m := natstest.Request(t, js.Conn(), webhookapi.TenantSubject(tenant, op), b)
	if e := m.Header.Get("Nats-Service-Error"); e != "" {
		t.Fatalf("webhook %s: %s", op, e)
	}
	var reply webhookapi.Reply
	if err := json.Unmarshal(m.Data, &reply); err != nil {
		t.Fatal(err)
	}
	return reply
}

// addHook adds a webhook of tenant posting to r, which learns its secret.
func addHook(t *testing.T, js jetstream.JetStream, tenant string, r *receiver, events ...string) *webhookapi.Webhook {
	t.Helper()
	reply := webhookAPI(t, js, tenant, webhookapi.OpAdd, webhookapi.Request{URL: r.URL + "/hook", Events: events})
	if !strings.HasPrefix(reply.Secret, "whsec_") || reply.Webhook == nil {
		t.Fatalf("added: %+v", reply)
	}
	r.mu.Lock()
	r.secret = reply.Secret
	r.mu.Unlock()
	return reply.Webhook
}

// deliveriesOf returns the recorded attempts of webhook h of tenant.
func deliveriesOf(t *testing.T, js jetstream.JetStream, tenant string, h *webhookapi.Webhook) []webhookapi.Delivery {
	t.Helper()
	return webhookAPI(t, js, tenant, webhookapi.OpDeliveries, webhookapi.Request{ID: h.ID}).Deliveries
}

func ok(received, int) int { return http.StatusNoContent }

// TestWebhooksOnceEachAcrossARestart records session events while the
// gateway runs, while it is stopped and after it starts again: each
// announced event reaches its tenant's receiver once, signed, with the
// payload's fields, and the other tenant's receiver gets none of them.
func TestWebhooksOnceEachAcrossARestart(t *testing.T) {
	t.Parallel()
	js, harness, start := webhookGateway(t, WebhookConfig{RetryDelay: 50 * time.Millisecond, MaxAttempts: 3})
	stop := start()
	acme, initech := newReceiver(t, ok), newReceiver(t, ok)
	addHook(t, js, "acme", acme)
	addHook(t, js, "initech", initech, webhookapi.EventFailed)
	a, b := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	header := func(typ string, session uuid.UUID) event.Header { return event.NewHeader(typ, "acme", session) }

	done := &event.SessionCompleted{Header: header(event.TypeSessionCompleted, a), Answer: "ok"}
	record(t, harness, &event.SessionRequested{Header: header(event.TypeSessionRequested, a), Request: uuid.New(), User: "ada", Prompt: "go"})
	record(t, harness, done)
	natstest.WaitFor(t, 10*time.Second, func() error {
		if n := len(acme.ids()); n != 1 {
			return fmt.Errorf("%d webhooks arrived, want 1", n)
		}
		return nil
	})
	stop()

	// While the gateway is down.
	held := &event.ApprovalRequested{Header: header(event.TypeApprovalRequested, b), Call: uuid.New(), Tool: "Bash", Reason: "rm"}
	failed := &event.SessionFailed{Header: header(event.TypeSessionFailed, b), Code: event.CodeModelError, Reason: "down"}
	record(t, harness, held)
	record(t, harness, failed)
	start()
	stopped := &event.SessionStopped{Header: header(event.TypeSessionStopped, a), By: "ada", Reason: "enough"}
	record(t, harness, stopped)

	want := map[string]webhookapi.Payload{
		webhookapi.MessageID(done.ID):    {Type: webhookapi.EventIdle, Data: webhookapi.Data{SessionID: a.String(), Status: "completed", StopReason: "end_turn"}},
		webhookapi.MessageID(held.ID):    {Type: webhookapi.EventRequiresAction, Data: webhookapi.Data{SessionID: b.String(), Status: "waiting", StopReason: "requires_action", Tool: "Bash", Reason: "rm"}},
		webhookapi.MessageID(failed.ID):  {Type: webhookapi.EventFailed, Data: webhookapi.Data{SessionID: b.String(), Status: "failed", Code: event.CodeModelError, Reason: "down"}},
		webhookapi.MessageID(stopped.ID): {Type: webhookapi.EventTerminated, Data: webhookapi.Data{SessionID: a.String(), Status: "stopped", Reason: "enough"}},
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if n := len(acme.ids()); n != len(want) {
			return fmt.Errorf("%d of %d webhooks arrived", n, len(want))
		}
		return nil
	})
	for _, g := range acme.posts() {
		w, ok := want[g.id]
		if !ok {
			t.Errorf("a POST with webhook-id %s, no event's", g.id)
			continue
		}
		if !g.sigOK {
			t.Errorf("%s: the signature does not verify", g.id)
		}
		if g.payload.Type != w.Type || g.payload.Tenant != "acme" || g.payload.Data != w.Data || g.payload.Timestamp.IsZero() {
			t.Errorf("%s: payload %+v, want %+v of acme", g.id, g.payload, w)
		}
	}
	for id, n := range acme.ids() {
		if n != 1 {
			t.Errorf("%s arrived %d times, want once", id, n)
		}
	}
	if got := initech.posts(); len(got) != 0 {
		t.Errorf("initech's receiver got %d of acme's events", len(got))
	}
}

// TestWebhookRetriedUntilDelivered has a receiver answer 503 twice before
// 200: the event is posted three times under one webhook-id, each signed,
// and its deliveries say so.
func TestWebhookRetriedUntilDelivered(t *testing.T) {
	t.Parallel()
	js, harness, start := webhookGateway(t, WebhookConfig{RetryDelay: 50 * time.Millisecond, MaxAttempts: 5})
	start()
	r := newReceiver(t, func(_ received, n int) int {
		if n <= 2 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	h := addHook(t, js, "acme", r, webhookapi.EventIdle)
	session := uuid.Must(uuid.NewV7())
	done := &event.SessionCompleted{Header: event.NewHeader(event.TypeSessionCompleted, "acme", session)}
	record(t, harness, done)
	var ds []webhookapi.Delivery
	natstest.WaitFor(t, 10*time.Second, func() error {
		ds = deliveriesOf(t, js, "acme", h)
		if len(ds) == 0 || ds[len(ds)-1].Outcome != webhookapi.Delivered {
			return fmt.Errorf("deliveries %+v", ds)
		}
		return nil
	})
	var got []string
	for _, d := range ds {
		got = append(got, fmt.Sprintf("%d:%d:%s", d.Attempt, d.Status, d.Outcome))
		if d.MessageID != webhookapi.MessageID(done.ID) || d.Session != session || d.Event != webhookapi.EventIdle {
			t.Errorf("delivery %+v, not of the event", d)
		}
	}
	if want := []string{"1:503:retrying", "2:503:retrying", "3:200:delivered"}; !slices.Equal(got, want) {
		t.Errorf("deliveries %v, want %v", got, want)
	}
	posts := r.posts()
	if len(posts) != 3 {
		t.Fatalf("%d POSTs, want 3", len(posts))
	}
	for _, p := range posts {
		if p.id != webhookapi.MessageID(done.ID) || !p.sigOK {
			t.Errorf("POST %s (signature ok: %v), want %s signed", p.id, p.sigOK, webhookapi.MessageID(done.ID))
		}
	}
}

// TestWebhookGivenUpBlocksNothing has a receiver fail one event always:
// it is recorded as failed after the last attempt, and the next event of
// the same session is delivered at its first attempt meanwhile. Another
// webhook of the tenant, which took the event at once, is not posted it
// again on its redeliveries.
func TestWebhookGivenUpBlocksNothing(t *testing.T) {
	t.Parallel()
	js, harness, start := webhookGateway(t, WebhookConfig{RetryDelay: 100 * time.Millisecond, MaxAttempts: 4})
	start()
	r := newReceiver(t, func(got received, _ int) int {
		if got.payload.Type == webhookapi.EventBudgetReached {
			return http.StatusInternalServerError
		}
		return http.StatusAccepted
	})
	h := addHook(t, js, "acme", r)
	other := newReceiver(t, ok)
	addHook(t, js, "acme", other)
	session := uuid.Must(uuid.NewV7())
	poison := &event.SessionPaused{Header: event.NewHeader(event.TypeSessionPaused, "acme", session), Budget: "session.steps", Reason: "steps"}
	next := &event.SessionStopped{Header: event.NewHeader(event.TypeSessionStopped, "acme", session), By: "ada"}
	record(t, harness, poison)
	record(t, harness, next)
	var ds []webhookapi.Delivery
	natstest.WaitFor(t, 20*time.Second, func() error {
		ds = deliveriesOf(t, js, "acme", h)
		for _, d := range ds {
			if d.MessageID == webhookapi.MessageID(poison.ID) && d.Outcome == webhookapi.Failed {
				return nil
			}
		}
		return fmt.Errorf("deliveries %+v", ds)
	})
	var gaveUp, delivered *webhookapi.Delivery
	attempts := 0
	for i, d := range ds {
		switch {
		case d.MessageID == webhookapi.MessageID(poison.ID):
			attempts++
			if d.Outcome == webhookapi.Failed {
				gaveUp = &ds[i]
			}
		case d.MessageID == webhookapi.MessageID(next.ID) && d.Outcome == webhookapi.Delivered:
			delivered = &ds[i]
		}
	}
	if attempts != 4 || gaveUp.Attempt != 4 || gaveUp.Status != http.StatusInternalServerError {
		t.Errorf("the failing event: %d attempts, given up at %+v; want 4, the last failed with 500", attempts, gaveUp)
	}
	if delivered == nil || delivered.Attempt != 1 || !delivered.Time.Before(gaveUp.Time) {
		t.Errorf("the next event's delivery %+v, want its first attempt, before the failing one was given up (%s)", delivered, gaveUp.Time)
	}
	// Given up, it is acknowledged: nothing waits to be posted again.
	natstest.WaitFor(t, 10*time.Second, func() error {
		c, err := js.Consumer(context.Background(), bus.StreamEvents, bus.ConsumerGatewayWebhooks)
		if err != nil {
			return err
		}
		info, err := c.Info(context.Background())
		if err != nil {
			return err
		}
		if info.NumAckPending != 0 || info.NumPending != 0 {
			return fmt.Errorf("%d events wait for an ack, %d for a delivery", info.NumAckPending, info.NumPending)
		}
		return nil
	})
	if n := r.ids()[webhookapi.MessageID(poison.ID)]; n != 4 {
		t.Errorf("the failing event was posted %d times, want 4", n)
	}
	for id, n := range other.ids() {
		if n != 1 {
			t.Errorf("the other webhook was posted %s %d times, want once", id, n)
		}
	}
	if n := len(other.ids()); n != 2 {
		t.Errorf("the other webhook got %d events, want 2", n)
	}
}
