package bus

import (
	"encoding/json"
	"fmt"

	"github.com/google/uuid"

	"corral.dev/pkg/event"
)

// DecodeToolCall decodes a call delivered from the TOOLS stream and checks
// it against its subject, tools.<service>.<tenant>.<session>: a call whose
// body names another tenant or session, or no call, is refused with an
// error matching [ErrRejected]. Only the harness may publish calls; this
// keeps a mistake or a forged body from acting in another session.
func DecodeToolCall(m Msg) (*event.ToolCall, error) {
	tenant, session, err := ParseSubject(m.Subject)
	if err != nil {
		return nil, Rejected(err)
	}
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
	return &c, nil
}
