package gateway

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/credential"
	"corral.dev/pkg/event"
	"corral.dev/pkg/logtest"
	"corral.dev/pkg/model"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/policy"
	"corral.dev/pkg/sessionlog"
)

// testAPI is the gateway's API on an embedded server, with one key
// signed in as a bot of tenant acme (its connection made by the test, not
// through the auth service), and a Log that records as the harness.
type testAPI struct {
	s       *Service
	srv     *httptest.Server
	nc      *nats.Conn
	js      jetstream.JetStream
	harness *sessionlog.Log
	key     string
	// client is the key's connection: what it was sent is what the
	// gateway read for it.
	client *nats.Conn
}

const testKey = "c-0123456789abcdef0123456789abcdef:secret"

func newAPI(t testing.TB) *testAPI {
	t.Helper()
	srv, nc, js := natstest.Run(t)
	ctx := context.Background()
	if err := Setup(ctx, js); err != nil {
		t.Fatal(err)
	}
	s, err := New(ctx, Config{Prices: policy.Default(), Heartbeat: time.Minute, Webhooks: WebhookConfig{Key: testWebhookKey}}, js, nil, slog.New(slog.NewTextHandler(&logtest.Buffer{}, nil)))
	if err != nil {
		t.Fatal(err)
	}
	cnc, cjs := natstest.Connect(t, srv.ClientURL())
	cred := credential.Credential{ID: "c-0123456789abcdef0123456789abcdef", Tenant: "acme", Role: credential.RoleBot}
	injectKey(s.clients, testKey, &client{nc: cnc, js: cjs, cred: cred, logs: sessionlog.New(cjs, sessionlog.Options{Reader: "gateway-client", Client: true})})
	hs := httptest.NewServer(s.routes())
	t.Cleanup(hs.Close)
	return &testAPI{s: s, srv: hs, nc: nc, js: js, harness: sessionlog.New(js, sessionlog.Options{As: sessionlog.Harness}), key: testKey, client: cnc}
}

// injectKey makes c the signed-in connection of key.
func injectKey(cs *clients, key string, c *client) {
	c.ready = make(chan struct{})
	close(c.ready)
	c.last = time.Now()
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.conns[sha256.Sum256([]byte(key))] = c
}

// get sends a GET of path with the API's key.
func (a *testAPI) get(t testing.TB, path string, header ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, a.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-api-key", a.key)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// record appends ev to its session's log as the harness.
func (a *testAPI) record(t testing.TB, ev event.Event) {
	t.Helper()
	if err := a.harness.Record(context.Background(), ev, ev.Head().ID.String()); err != nil {
		t.Fatal(err)
	}
}

// startSession records a session's first request, and returns its ID.
func (a *testAPI) startSession(t testing.TB) uuid.UUID {
	t.Helper()
	id := uuid.Must(uuid.NewV7())
	a.record(t, &event.SessionRequested{Header: event.NewHeader(event.TypeSessionRequested, "acme", id), Request: uuid.New(), User: "ada", Model: "openai:m", Prompt: "go"})
	return id
}

// responded records the model's response of turn with text.
func (a *testAPI) responded(t testing.TB, session uuid.UUID, turn int, text string) {
	t.Helper()
	a.record(t, &event.ModelResponded{Header: event.NewHeader(event.TypeModelResponded, "acme", session), Turn: turn, Model: "openai:m",
		Content: []model.Block{{Type: model.TextBlock, Text: text}}})
}

// sseEvent is one server-sent event.
type sseEvent struct {
	id, name string
	data     json.RawMessage
}

// sseReader reads server-sent events.
type sseReader struct {
	r *bufio.Reader
}

func newSSEReader(r io.Reader) *sseReader { return &sseReader{bufio.NewReader(r)} }

// next returns the next event (pings skipped).
func (s *sseReader) next() (sseEvent, error) {
	var ev sseEvent
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			return ev, err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if ev.name == "ping" || ev.name == "" && ev.data == nil {
				ev = sseEvent{}
				continue
			}
			return ev, nil
		case strings.HasPrefix(line, "id: "):
			ev.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			ev.data = json.RawMessage(strings.TrimPrefix(line, "data: "))
		}
	}
}
