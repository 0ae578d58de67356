package sandboxmanager

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/preview"
	"corral.dev/pkg/tool"
)

// Previews: the harness asks what an Edit of a workspace file that it
// holds for a reviewer would change ([bus.PreviewSubject]). Any node may
// receive the request; the session's workspace is on the node it is
// placed on, so the node that receives it answers from its own workspace
// directory if the session is placed here, and forwards it to the owner
// ([bus.NodePreviewSubject]) otherwise. A session placed nowhere has no
// workspace to show, and is not placed for a preview. Nothing runs in a
// sandbox for a preview, and it takes no call's slot or turn.

// servePreviews answers the requests for previews, the harness's and
// those other nodes forward here, until ctx is done.
func (s *Service) servePreviews(ctx context.Context) error {
	nc := s.js.Conn()
	forwarded := make(chan error, 1)
	go func() {
		forwarded <- preview.Serve(ctx, nc, bus.NodePreviewSubject(s.place.node), "", s.answerForwardedPreview)
	}()
	err := preview.Serve(ctx, nc, bus.PreviewFilter(bus.ServiceSandbox), bus.PreviewQueue(bus.ServiceSandbox), s.answerPreview)
	return errors.Join(err, <-forwarded)
}

// answerPreview answers a request for a preview from the harness. A
// request the harness did not sign for a preview by the sandbox is
// refused: no one else may have a node show a session's file.
func (s *Service) answerPreview(ctx context.Context, m *nats.Msg) (string, error) {
	c, a, err := s.decodePreview(ctx, m.Subject, m.Data)
	if err != nil {
		return "", err
	}
	owner, err := s.place.where(ctx, c.Tenant, c.Session)
	switch {
	case err != nil:
		return "", err
	case owner == "":
		return "", nil // no workspace anywhere
	case owner == s.place.node:
		return s.driver.Preview(c.Tenant, c.Session, a)
	}
	fwd := nats.NewMsg(bus.NodePreviewSubject(owner))
	fwd.Data = m.Data
	fwd.Header.Set(subjectHeader, m.Subject)
	return preview.Request(ctx, s.js.Conn(), fwd)
}

// answerForwardedPreview answers a request for a preview that another
// node forwarded here, checked against the subject it was sent on, as
// that node checked it. It is answered only if the session is placed
// here, and never forwarded again.
func (s *Service) answerForwardedPreview(ctx context.Context, m *nats.Msg) (string, error) {
	c, a, err := s.decodePreview(ctx, m.Header.Get(subjectHeader), m.Data)
	if err != nil {
		return "", err
	}
	owner, err := s.place.where(ctx, c.Tenant, c.Session)
	if err != nil {
		return "", err
	}
	if owner != s.place.node {
		return "", fmt.Errorf("session %s is not placed on node %s", c.Session, s.place.node)
	}
	return s.driver.Preview(c.Tenant, c.Session, a)
}

// where returns the node a session is placed on ("" for none), without
// placing it. A session placed here after this node restarted may have a
// workspace here older than its last snapshot (its next call restores
// it); its preview is of the workspace here.
func (p *placement) where(ctx context.Context, tenant string, session uuid.UUID) (string, error) {
	if p.owns(bus.SessionKey(tenant, session)) {
		return p.node, nil
	}
	rctx, cancel := bus.Bound(ctx)
	defer cancel()
	e, err := p.places.Get(rctx, bus.PlacementKey(tenant, session))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("look up the placement of session %s: %w", session, err)
	}
	return string(e.Value()), nil
}

// decodePreview decodes and checks a request for a preview sent on
// subject ([preview.Decode]), and logs a refusal.
func (s *Service) decodePreview(ctx context.Context, subject string, data []byte) (*event.ToolCall, *tool.EditArgs, error) {
	c, a, err := preview.Decode(subject, data, s.cfg.CallKey, bus.ServiceSandbox)
	if err != nil {
		s.log.WarnContext(ctx, "preview refused", "subject", subject, "err", err)
	}
	return c, a, err
}
