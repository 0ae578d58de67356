// Package preview makes what a reviewer reads beside an Edit held for
// approval: the unified diff, with its context, that the Edit would make
// to its file ([Edit]). Only the tool service that would run the call can
// read the file (the memory service its store, the sandbox-manager the
// session's workspace), so the harness asks it ([Ask]) on
// [bus.PreviewSubject], and it answers ([Serve]) with the diff, or with a
// line saying why there is none. A preview is informational: a decision
// approves the call's tool and input, never its preview.
package preview

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/aymanbagabas/go-udiff"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/tool"
)

// MaxBytes bounds the files previewed, and their diffs: an Edit of a
// larger file, or one making a larger file or diff, gets a line saying so
// instead of a diff. It keeps a preview, and the diffing, small next to
// the approval it goes with.
const MaxBytes = 1 << 20

// maxEdits bounds the occurrences of old_string a previewed Edit replaces:
// the diff's cost grows with them times the file's size, and a reviewer
// reads no more.
const maxEdits = 1000

// Timeout bounds how long the harness waits for a preview, and a service
// works on one: without an answer in time the approval is asked for
// without a preview.
const Timeout = 2 * time.Second

// Edit returns the unified diff, with three lines of context, of content,
// the file named name (its absolute path, shown as a<name> and b<name>),
// and the file Edit call a makes of it, replacing old_string as the
// services replace it. It returns an error saying why there is no diff,
// for the reviewer, when the service would refuse the Edit (old_string is
// not in content, or is in it more than once without replace_all) or the
// file or diff is too large to preview.
func Edit(name, content string, a *tool.EditArgs) (string, error) {
	if len(content) > MaxBytes {
		return "", fmt.Errorf("%s is %d bytes: previews are made of files of up to %d MiB", name, len(content), MaxBytes>>20)
	}
	after, k, err := tool.ApplyEdit(name, content, a, MaxBytes)
	var e *tool.EditError
	switch {
	case errors.As(err, &e) && e.Kind == tool.EditNotFound:
		return "", fmt.Errorf("old_string is not in %s as it is now: the Edit will be refused", name)
	case errors.As(err, &e) && e.Kind == tool.EditNotUnique:
		return "", fmt.Errorf("old_string occurs %d times in %s and replace_all is not set: the Edit will be refused", e.Occurrences, name)
	case errors.As(err, &e) && e.Kind == tool.EditTooLarge:
		return "", fmt.Errorf("the Edit would make %s %d bytes: previews are made of files of up to %d MiB", name, e.Size, MaxBytes>>20)
	case err != nil:
		return "", err
	}
	if k > maxEdits {
		return "", fmt.Errorf("the Edit replaces %d occurrences in %s: previews show up to %d", k, name, maxEdits)
	}
	d := udiff.Unified("a"+name, "b"+name, content, after)
	if len(d) > MaxBytes {
		return "", fmt.Errorf("the diff the Edit makes to %s is %d bytes: previews show up to %d MiB", name, len(d), MaxBytes>>20)
	}
	return d, nil
}

// Decode decodes and checks a request for a preview that service
// received, sent on subject (where the harness sent it, even when another
// node forwarded it): signed by the harness's key for a preview by
// service ([bus.DecodePreview]), of an Edit whose file service keeps.
func Decode(subject string, data []byte, harness ed25519.PublicKey, service string) (*event.ToolCall, *tool.EditArgs, error) {
	if !strings.HasPrefix(subject, strings.TrimSuffix(bus.PreviewFilter(service), ">")) {
		return nil, nil, fmt.Errorf("%s is not a subject of the %s's previews", subject, service)
	}
	c, err := bus.DecodePreview(bus.Msg{Subject: subject, Data: data}, harness)
	if err != nil {
		return nil, nil, err
	}
	args, err := tool.Parse(c.Name, c.Input)
	if err != nil {
		return nil, nil, err
	}
	a, ok := args.(*tool.EditArgs)
	if !ok {
		return nil, nil, fmt.Errorf("previews are of Edits, not of this %s call", c.Name)
	}
	if to, _, err := tool.Route(c.Name, c.Input); err != nil || to != service {
		return nil, nil, fmt.Errorf("the %s makes previews of Edits of its own files, not of %s", service, a.FilePath)
	}
	return c, a, nil
}

// NoDiff is the line a preview is instead of a diff, saying why there is
// none.
func NoDiff(format string, args ...any) string {
	return "No diff: " + fmt.Sprintf(format, args...) + "."
}

// Ask asks the tool service that would run call c, which the harness
// signed for a preview ([event.ToolCall.SignPreview]), what it would
// change, waiting at most [Timeout]. It returns the service's answer (a
// diff, or a line saying why there is none), or an error when there is
// none: no instance answered in time, or it refused the request.
func Ask(ctx context.Context, nc *nats.Conn, service string, c *event.ToolCall) (string, error) {
	data, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	m := nats.NewMsg(bus.PreviewSubject(service, c.Tenant, c.Session))
	m.Data = data
	return Request(ctx, nc, m)
}

// Request sends request m for a preview (from [Ask], or forwarded by the
// service that received it to the instance that can answer it), and
// returns the answer, or an error when there is none: no answer before
// ctx ends, or a refusal ([Refuse]).
func Request(ctx context.Context, nc *nats.Conn, m *nats.Msg) (string, error) {
	// A request the server refuses to let through fails at once.
	ctx, stop := bus.WhilePermitted(ctx, nc, m.Subject)
	defer stop()
	r, err := nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		return "", fmt.Errorf("ask %s: %w", m.Subject, bus.Refusal(ctx, err))
	}
	if why := r.Header.Get(micro.ErrorHeader); why != "" {
		return "", fmt.Errorf("%s: refused: %s", m.Subject, why)
	}
	return string(r.Data), nil
}

// Answer makes the answer to a request for a preview: the text the
// reviewer reads ("" for none), or an error refusing the request, which
// goes back to the requester. ctx ends at [Timeout].
type Answer func(ctx context.Context, m *nats.Msg) (string, error)

// workers answer the requests a subscription takes, at most this many at
// once; requests arriving faster wait in a buffer, and past it are
// dropped (the harness goes on without a preview).
const workers = 16

// Serve answers the requests for previews on subject, as one of the queue
// group queue ("" for none), with answer until ctx is done. It returns
// once the requests being answered are, and an error only if it could not
// subscribe.
func Serve(ctx context.Context, nc *nats.Conn, subject, queue string, answer Answer) error {
	msgs := make(chan *nats.Msg, 256)
	sub, err := nc.ChanQueueSubscribe(subject, queue, msgs)
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", subject, err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				case m := <-msgs:
					respond(ctx, m, answer)
				}
			}
		})
	}
	<-ctx.Done()
	_ = sub.Unsubscribe()
	close(stop)
	wg.Wait()
	return nil
}

func respond(ctx context.Context, m *nats.Msg, answer Answer) {
	actx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	text, err := answer(actx, m)
	if err != nil {
		Refuse(m, err)
		return
	}
	_ = m.Respond([]byte(text))
}

// Refuse answers request m with an error saying why, which [Ask] returns.
func Refuse(m *nats.Msg, why error) {
	r := nats.NewMsg(m.Reply)
	r.Header.Set(micro.ErrorHeader, why.Error())
	r.Header.Set(micro.ErrorCodeHeader, "400")
	_ = m.RespondMsg(r)
}
