package bus

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"corral.dev/pkg/event"
)

// DecodeToolCall decodes a call delivered from the TOOLS stream and checks
// it against its subject, tools.<service>.<tenant>.<session>, and the
// harness's public key: a call whose body names another tenant or
// session, or no call, or that the harness did not sign for the subject's
// service, is refused with an error matching [ErrRejected]. Only the
// harness may publish calls, but a service of the same account can have
// the server publish a body it chose on any subject; the signature keeps
// such a body, or a mistake, from running. A nil key skips the signature:
// for tests of a service alone.
func DecodeToolCall(m Msg, harness ed25519.PublicKey) (*event.ToolCall, error) {
	return decodeCall(m, "tools.", harness, (*event.ToolCall).Verify)
}

// DecodePreview decodes a request for a preview of a call, received on
// [PreviewSubject] (m.Subject is the subject the request was sent on, even
// when another node forwarded it), and checks it as [DecodeToolCall]
// checks a call, but for the harness's signature of a preview request
// ([event.ToolCall.SignPreview]): a service shows a tenant's file to no
// one else. A call signed to run is refused too: the two are never
// mistaken for each other.
func DecodePreview(m Msg, harness ed25519.PublicKey) (*event.ToolCall, error) {
	return decodeCall(m, "preview.", harness, (*event.ToolCall).VerifyPreview)
}

func decodeCall(m Msg, prefix string, harness ed25519.PublicKey, verify func(*event.ToolCall, ed25519.PublicKey, string) error) (*event.ToolCall, error) {
	rest, ok := strings.CutPrefix(m.Subject, prefix)
	if !ok {
		return nil, Rejected(fmt.Errorf("%w: %s is not a %s subject", ErrBadSubject, m.Subject, strings.TrimSuffix(prefix, ".")))
	}
	tenant, session, err := ParseSubject(m.Subject)
	if err != nil {
		return nil, Rejected(err)
	}
	service, _, _ := strings.Cut(rest, ".")
	var c event.ToolCall
	if err := json.Unmarshal(m.Data, &c); err != nil {
		return nil, Rejected(fmt.Errorf("decode %s: %w", m.Subject, err))
	}
	switch {
	case c.Type != event.TypeToolCall:
		return nil, Rejected(fmt.Errorf("a %q body on a tool call subject", c.Type))
	case c.Tenant != tenant || c.Session != session:
		return nil, Rejected(fmt.Errorf("a call of %s/%s on the subject of %s/%s", c.Tenant, c.Session, tenant, session))
	case c.Call == uuid.Nil:
		return nil, Rejected(fmt.Errorf("a call with no call ID"))
	case event.CheckTenant(tenant) != nil:
		return nil, Rejected(event.CheckTenant(tenant))
	}
	if harness != nil {
		if err := verify(&c, harness, service); err != nil {
			return nil, Rejected(err)
		}
	}
	if err := c.CheckResultID(); err != nil {
		return nil, Rejected(err)
	}
	return &c, nil
}
