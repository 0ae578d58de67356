package gateway

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
	"corral.dev/services/gateway/internal/wire"
)

// Who may change an agent. Any key of a tenant may create agents, and
// read and start sessions of every agent of its tenant. An agent is the
// user's who created it (the user the creating key acts as: a user's key
// its user, a bot's or a reviewer's the user it speaks for). Only that
// user's keys, and a reviewer's or an operator's key of the tenant, may
// update or archive it: an agent's system prompt and its always_ask tools
// apply to every session started from it, so another user changing it
// could give instructions to its owner's sessions, or take away the
// approvals they rely on.
//
// The server's permissions enforce it, not only the gateway: an agent is
// kept under its owner's user token, <tenant>.agent.<user token>.<id>,
// and a user's credential may write its own user's agents' keys alone
// (see credential.Permissions), while a reviewer's, an operator's and a
// bot's (which speaks for any user of the tenant) may write every key of
// the tenant. A user signed in to NATS directly changes no one else's
// agent either. An agent's ID carries its owner's token,
// agent_<32 hex digits>_<user token>, so that one read finds its record,
// and no user can make an agent another's ID names: the same digits under
// its own token are another ID.
//
// Agents made before agents had owners, agent_<32 hex digits>, stay at
// <tenant>.agent.<id>: read and used as before, and changed only by a
// reviewer's or an operator's key, since no user's credential may write
// there. Nothing needs migrating.

// agentPrefix starts every agent's ID.
const agentPrefix = "agent_"

// agentDigits is the length of the hex digits of an agent's ID: a UUID's.
const agentDigits = 32

// newAgentID returns the ID of a new agent of user.
func newAgentID(user string) string {
	return agentPrefix + strings.ReplaceAll(uuid.Must(uuid.NewV7()).String(), "-", "") + "_" + bus.UserToken(user)
}

// agentOwner returns the user whose agent id is ("" for an agent made
// before agents had owners), and whether id is an agent's ID at all.
func agentOwner(id string) (string, bool) {
	rest, ok := strings.CutPrefix(id, agentPrefix)
	if !ok || len(rest) < agentDigits || strings.Trim(rest[:agentDigits], "0123456789abcdef") != "" {
		return "", false
	}
	if len(rest) == agentDigits {
		return "", true
	}
	tok, ok := strings.CutPrefix(rest[agentDigits:], "_")
	if !ok {
		return "", false
	}
	user, err := bus.ParseUserToken(tok)
	if err != nil {
		return "", false
	}
	return user, true
}

// agentKey is the key of the record of agent id of tenant, an ID for
// which agentOwner holds: under its owner's user token, or for an agent
// that has none, <tenant>.agent.<id>.
func agentKey(tenant, id string) string {
	owner, _ := agentOwner(id)
	if owner == "" {
		return recordKey(tenant, kindAgent, id)
	}
	return recordKey(tenant, kindAgent, bus.UserToken(owner)+"."+id)
}

// mayChangeAgent refuses c's key unless it may update or archive agent id:
// its owner's, or a reviewer's or an operator's. The server would refuse
// a user's write of another user's agent anyway; a bot's, whose
// credential may write every key of the tenant, is refused here unless
// the user it speaks for owns the agent.
func mayChangeAgent(c *caller, id string) error {
	if c.cred.Role == credential.RoleReviewer || c.cred.Role == credential.RoleOperator {
		return nil
	}
	switch owner, _ := agentOwner(id); {
	case owner == "":
		return &apiError{http.StatusForbidden, wire.Permission, fmt.Sprintf(
			"agent %s was made before agents had owners: only a reviewer's or an operator's key may update or archive it", id)}
	case owner != c.user:
		return &apiError{http.StatusForbidden, wire.Permission, fmt.Sprintf(
			"agent %s is user %s's: only its owner's keys, or a reviewer's or an operator's, may update or archive it (any key of the tenant may use it)", id, owner)}
	}
	return nil
}
