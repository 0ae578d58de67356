package credential

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"corral.dev/pkg/bus"
)

// UserInfoSubject is where a client asks the server who it is signed in
// as. The server answers it itself, in every account, with the user and
// the permissions of the connection that asks, and nothing of anyone
// else's.
const UserInfoSubject = "$SYS.REQ.USER.INFO"

// Whoami asks the server who nc is signed in as, and returns the
// credential whose permissions the server gave the connection ([Identify]):
// what the auth service made of the sign-in, not what the client was told
// of its credential. An error wraps [ErrInvalid] when the permissions are
// no credential's: a service's user, a server that signs in anyone, or an
// auth service of another version than this package. ctx bounds the
// request.
func Whoami(ctx context.Context, nc *nats.Conn) (Credential, error) {
	ctx, cancel := bus.Bound(ctx)
	defer cancel()
	ctx, stop := bus.WhilePermitted(ctx, nc, UserInfoSubject)
	defer stop()
	msg, err := nc.RequestWithContext(ctx, UserInfoSubject, nil)
	if err != nil {
		return Credential{}, fmt.Errorf("ask the server who this connection is: %w", bus.Refusal(ctx, err))
	}
	var resp struct {
		Data *struct {
			User        string              `json:"user"`
			Permissions *server.Permissions `json:"permissions"`
		} `json:"data"`
		Error *struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return Credential{}, fmt.Errorf("ask the server who this connection is: %w", err)
	}
	switch {
	case resp.Error != nil:
		return Credential{}, fmt.Errorf("ask the server who this connection is: %d %s", resp.Error.Code, resp.Error.Description)
	case resp.Data == nil:
		return Credential{}, errors.New("ask the server who this connection is: no answer")
	}
	// The user a client signed in as: its credential's ID.
	id := resp.Data.User
	if !IsID(id) {
		return Credential{}, fmt.Errorf("%w: the connection is signed in as %q, not with a credential", ErrInvalid, id)
	}
	var p Permissions
	if sp := resp.Data.Permissions; sp != nil {
		if sp.Publish != nil {
			p.Publish, p.Deny = sp.Publish.Allow, sp.Publish.Deny
		}
		if sp.Subscribe != nil {
			p.Subscribe = sp.Subscribe.Allow
		}
	}
	return Identify(id, p)
}

// Identify returns the credential with ID id that p are the permissions
// of: its tenant and role, and the user of a user's or a reviewer's (a
// bot's and an operator's users name no subject, and are left empty). An
// error wraps [ErrInvalid] when p are not exactly what [Credential.Permissions]
// gives any credential of that ID.
func Identify(id string, p Permissions) (Credential, error) {
	c := Credential{ID: id}
	// The subjects that say who: the requests one (its tenant, and a
	// user's user) and a decide (a reviewer's reviewer, or an
	// operator's), in whatever order the server lists them.
	var user, reviewer string
	for _, s := range p.Publish {
		tok := strings.Split(s, ".")
		switch {
		case len(tok) == 4 && tok[0] == "requests":
			c.Tenant, user = tok[1], tok[3]
		case len(tok) == 5 && s == bus.ApprovalAPI(tok[2], tok[3], bus.OpDecide):
			reviewer = tok[3]
		}
	}
	switch {
	case c.Tenant == "":
		return Credential{}, fmt.Errorf("%w: the connection may publish no request: it is no client's", ErrInvalid)
	case c.Tenant == AllTenants:
		c.Role = RoleOperator
	case user != "*":
		c.Role = RoleUser
		c.User, _ = bus.ParseUserToken(user)
	case reviewer != "":
		c.Role = RoleReviewer
		c.User, _ = bus.ParseUserToken(reviewer)
	default:
		c.Role = RoleBot
	}
	want := c.Permissions()
	if !sameSet(want.Publish, p.Publish) || !sameSet(want.Deny, p.Deny) || !sameSet(want.Subscribe, p.Subscribe) {
		return Credential{}, fmt.Errorf("%w: the connection's permissions are not those of a %s of tenant %q (is the auth service of another version?)", ErrInvalid, c.Role, c.Tenant)
	}
	return c, nil
}

// sameSet reports whether a and b hold the same subjects.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}
