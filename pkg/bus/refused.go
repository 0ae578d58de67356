package bus

import (
	"context"
	"errors"
	"regexp"
	"sync"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// ErrRefused is the cause of a context ended by [WhilePermitted]: the
// server refused to let the connection publish on a subject.
var ErrRefused = errors.New("refused by the server: this credential may not publish there")

// refusalWatches holds the watches of each connection made by [Connect].
var refusalWatches sync.Map // *nats.Conn → *watches

type watches struct {
	mu sync.Mutex
	by map[*watch]struct{}
}

type watch struct {
	subject string
	cancel  context.CancelCauseFunc
}

// publishRefused finds the subject in the server's report of a refused
// publish.
var publishRefused = regexp.MustCompile(`Permissions Violation for Publish to "([^"]+)"`)

// refused ends the watches of nc on the subject err reports refused.
func refused(nc *nats.Conn, err error) {
	m := publishRefused.FindStringSubmatch(err.Error())
	if m == nil {
		return
	}
	v, ok := refusalWatches.Load(nc)
	if !ok {
		return
	}
	ws := v.(*watches)
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for w := range ws.by {
		if server.SubjectMatchesFilter(m[1], w.subject) {
			w.cancel(ErrRefused)
		}
	}
}

// WhilePermitted returns a context that ends as ctx does, or as soon as
// the server reports refusing nc a publish on subject (which may hold
// wildcards: [ConsumerAPI], say), with a cause
// wrapping [ErrRefused]: a request whose publish was refused then fails
// at once instead of waiting out its time-out. The server reports only
// to connections made by [Connect]. The caller calls the returned
// function when done.
func WhilePermitted(ctx context.Context, nc *nats.Conn, subject string) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	v, _ := refusalWatches.LoadOrStore(nc, &watches{by: make(map[*watch]struct{})})
	ws := v.(*watches)
	w := &watch{subject: subject, cancel: cancel}
	ws.mu.Lock()
	ws.by[w] = struct{}{}
	ws.mu.Unlock()
	return ctx, func() {
		ws.mu.Lock()
		delete(ws.by, w)
		ws.mu.Unlock()
		cancel(nil)
	}
}

// ConsumerAPI is the subject of every request of the JetStream API about
// the consumers of stream (creating one, looking one up, deleting one),
// for [WhilePermitted]: a consumer whose creation the server refuses
// fails at once.
func ConsumerAPI(stream string) string { return "$JS.API.CONSUMER.*." + stream + ".>" }

// Refusal returns the cause of ctx's end if it wraps [ErrRefused], else
// err: what to report of an operation under [WhilePermitted].
func Refusal(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); errors.Is(cause, ErrRefused) {
		return cause
	}
	return err
}

// ConsumerCreate is the prefix of the JetStream API's subjects that create
// a consumer: $JS.API.CONSUMER.CREATE.<stream>.<name>[.<filter>].
const ConsumerCreate = "$JS.API.CONSUMER.CREATE."

// ConsumerGate is the prefix of the subjects on which the auth service
// creates clients' consumers for them: a client's request to create a
// consumer, on ConsumerCreate+X, reaches the services' account as
// ConsumerGate+X.
const ConsumerGate = "corral.consumers.create."
