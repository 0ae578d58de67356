package egressapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
)

// Group is a vault of the HTTP API: a named group of the tenant's own
// vaults, its credentials (each a [Vault] whose Group is the group's ID).
// A session that names groups ([Identity].Vaults) gets their credentials
// alone. The gateway keeps a group's record in [bus.BucketGateway] under
// [GroupKey], written as the client that asks (a reviewer's or an
// operator's credential, as the tenant's vaults take); the credentials
// are the egress service's, which alone sets what a vault's Group is, so
// a record names nothing a session could get without them.
type Group struct {
	ID          string            `json:"id"`
	DisplayName string            `json:"display_name"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	CreatedAt   time.Time         `json:"created_at"`
	UpdatedAt   time.Time         `json:"updated_at"`
	// ArchivedAt is when it was archived: its credentials' secrets are
	// gone, and no session may name it.
	ArchivedAt *time.Time `json:"archived_at,omitempty"`
}

// GroupKey is the key of the record of group id of tenant in
// [bus.BucketGateway].
func GroupKey(tenant, id string) string { return tenant + ".vault." + id }

// ErrNoGroup is returned by [LookupGroup] for a group the tenant does not
// have.
var ErrNoGroup = errors.New("no such vault")

// LookupGroup reads the record of group id of tenant through js, with
// direct gets of the gateway's bucket. A group deleted, never made, or
// whose record is not the group it names is [ErrNoGroup].
func LookupGroup(ctx context.Context, js jetstream.JetStream, tenant, id string) (Group, error) {
	key := GroupKey(tenant, id)
	m, err := bus.LastBySubject(ctx, js, "KV_"+bus.BucketGateway, "$KV."+bus.BucketGateway+"."+key)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound), errors.Is(err, nats.ErrNoResponders):
		// No record, or no bucket of the gateway's on this server.
		return Group{}, fmt.Errorf("%w %s in tenant %s", ErrNoGroup, id, tenant)
	case err != nil:
		return Group{}, fmt.Errorf("read vault %s: %w", id, err)
	}
	var g Group
	if len(m.Data) == 0 || json.Unmarshal(m.Data, &g) != nil || g.ID != id {
		// Deleted, or not a record the gateway wrote.
		return Group{}, fmt.Errorf("%w %s in tenant %s", ErrNoGroup, id, tenant)
	}
	return g, nil
}
