package memory

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/preview"
)

// servePreviews answers the harness's requests for previews of the Edits
// it holds for reviewers until ctx is done.
func (s *Service) servePreviews(ctx context.Context) error {
	return preview.Serve(ctx, s.nc, bus.PreviewFilter(bus.ServiceMemory), bus.PreviewQueue(bus.ServiceMemory), s.answerPreview)
}

// answerPreview answers a request for a preview of an Edit with the diff
// it would make to its file as stored now, the call's user's own under
// /memories/private, or with a line saying why there is none: above all
// that the file changed since the session read it, when the Edit will be
// refused as [Service.write] refuses it. A request the harness did not
// sign for a preview by the memory service is refused: no one else may
// have the service show a tenant's file.
func (s *Service) answerPreview(ctx context.Context, m *nats.Msg) (string, error) {
	c, a, err := preview.Decode(m.Subject, m.Data, s.cfg.CallKey, bus.ServiceMemory)
	if err != nil {
		s.log.WarnContext(ctx, "preview refused", "subject", m.Subject, "err", err)
		return "", err
	}
	k, bad := keyOf(c, a.FilePath)
	if bad != nil {
		return "", errors.New(bad.text)
	}
	f, err := s.store.Get(ctx, k)
	switch {
	case errors.Is(err, ErrNotFound):
		return preview.NoDiff("%s does not exist: the Edit will be refused", k.Path), nil
	case err != nil:
		return "", fmt.Errorf("read %s: %w", k.Path, err)
	case c.ExpectVersion == 0:
		return preview.NoDiff("this session has not read %s: the Edit will be refused", k.Path), nil
	case f.Version != c.ExpectVersion:
		return preview.NoDiff("%s changed since this session read it (it read version %d, and it is at version %d now): the Edit will be refused as it stands", k.Path, c.ExpectVersion, f.Version), nil
	}
	d, err := preview.Edit(k.Path, f.Content, a)
	if err != nil {
		return preview.NoDiff("%v", err), nil
	}
	return d, nil
}
