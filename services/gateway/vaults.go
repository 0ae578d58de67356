package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
	"corral.dev/pkg/egressapi"
	"corral.dev/services/gateway/internal/wire"
)

// A vault of the API is a group of the tenant's own Corral vaults
// ([egressapi.Group]): its record, a display name and metadata, is kept
// in the gateway's bucket; its credentials are Corral vaults the egress
// service keeps (each a secret, the hosts it may go to, and how it is
// injected), whose Group is the vault's ID. A session that names vaults
// (vault_ids) gets the credentials of those alone; one that names none
// gets every vault of the tenant and its user that binds a request's
// host, as every Corral session does.
//
// The API's vaults are the tenant's: creating, changing, archiving and
// deleting them, and their credentials, take a reviewer's or an
// operator's key, as corral vaults --tenant-wide does. Any key of the
// tenant reads them. No answer ever holds a secret.

const kindVault = "vault"

// vaultBody is the body of POST /v1/vaults and of an update. Metadata
// values are pointers: on an update, null removes a key.
type vaultBody struct {
	DisplayName *string            `json:"display_name"`
	Metadata    map[string]*string `json:"metadata"`
}

// Bounds the API sets on what a client says about a vault.
const (
	maxDisplayName = 255
	maxMetadata    = 16
	maxMetaKey     = 64
	maxMetaValue   = 512
)

// patchMetadata applies patch to md (null removes a key) and checks the
// result against the API's bounds.
func patchMetadata(md map[string]string, patch map[string]*string) (map[string]string, error) {
	out := make(map[string]string, len(md))
	for k, v := range md {
		out[k] = v
	}
	for k, v := range patch {
		if v == nil {
			delete(out, k)
			continue
		}
		if k == "" || len(k) > maxMetaKey || len(*v) > maxMetaValue {
			return nil, badRequest("metadata %q: keys are 1 to %d characters, values at most %d", k, maxMetaKey, maxMetaValue)
		}
		out[k] = *v
	}
	if len(out) > maxMetadata {
		return nil, badRequest("metadata: at most %d pairs", maxMetadata)
	}
	return out, nil
}

// checkName checks a display name as the API bounds it.
func checkName(field, name string, required bool) error {
	if required && name == "" || utf8.RuneCountInString(name) > maxDisplayName || strings.ContainsAny(name, "\r\n\x00") {
		return badRequest("%s: 1 to %d characters on one line", field, maxDisplayName)
	}
	return nil
}

// mayChangeVaults refuses c's key unless it may change the tenant's
// vaults: a reviewer's or an operator's, as the vault API lets only
// those change the tenant's own. A user's would be refused by the
// server's permissions on the records; a bot's, whose credential may
// write the gateway's records but not the tenant's vaults, is refused
// here, so that it makes no vault it could give no credential.
func mayChangeVaults(c *caller) error {
	if c.cred.Role == credential.RoleReviewer || c.cred.Role == credential.RoleOperator {
		return nil
	}
	return &apiError{http.StatusForbidden, wire.Permission, "creating, changing, archiving and deleting vaults and their credentials takes a reviewer's or an operator's key (corral credentials issue --reviewer), as the tenant's own vaults do (corral vaults --tenant-wide)"}
}

// vaultJSON is a vault as the API shows it.
func vaultJSON(g egressapi.Group) wire.Vault {
	return wire.Vault{Type: "vault", ID: g.ID, DisplayName: g.DisplayName, Metadata: orEmpty(g.Metadata),
		CreatedAt: g.CreatedAt, UpdatedAt: g.UpdatedAt, ArchivedAt: g.ArchivedAt}
}

// orEmpty is md, or an empty map for nil: the API shows metadata as an
// object, never null.
func orEmpty(md map[string]string) map[string]string {
	if md == nil {
		return map[string]string{}
	}
	return md
}

// vault returns c's tenant's vault id and the sequence of its record.
func (s *Service) vault(ctx context.Context, c *caller, id string) (egressapi.Group, uint64, error) {
	if !validID(id) {
		return egressapi.Group{}, 0, notFound("no vault %q", id)
	}
	var g egressapi.Group
	seq, err := readRecord(ctx, c.js, egressapi.GroupKey(c.tenant, id), &g)
	if errors.Is(err, errNoRecord) || err == nil && g.ID != id {
		return egressapi.Group{}, 0, notFound("no vault %s", id)
	}
	return g, seq, err
}

// createVault answers POST /v1/vaults.
func (s *Service) createVault(ctx context.Context, c *caller, w http.ResponseWriter, r *http.Request) error {
	var body vaultBody
	if err := decode(w, r, &body); err != nil {
		return err
	}
	if err := mayChangeVaults(c); err != nil {
		return err
	}
	if err := checkName("display_name", deref(body.DisplayName), true); err != nil {
		return err
	}
	md, err := patchMetadata(nil, body.Metadata)
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	// Lowercase, as a Corral vault's group must be.
	g := egressapi.Group{ID: "vlt_" + strings.ReplaceAll(uuid.Must(uuid.NewV7()).String(), "-", ""), DisplayName: *body.DisplayName, Metadata: md, CreatedAt: now, UpdatedAt: now}
	if err := writeRecord(ctx, c.js, egressapi.GroupKey(c.tenant, g.ID), g, 0); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, vaultJSON(g))
	return nil
}

// getVault answers GET /v1/vaults/{id}.
func (s *Service) getVault(ctx context.Context, c *caller, w http.ResponseWriter, r *http.Request) error {
	g, _, err := s.vault(ctx, c, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, vaultJSON(g))
	return nil
}

// updateVault answers POST /v1/vaults/{id}: its display name and
// metadata.
func (s *Service) updateVault(ctx context.Context, c *caller, w http.ResponseWriter, r *http.Request) error {
	var body vaultBody
	if err := decode(w, r, &body); err != nil {
		return err
	}
	if err := mayChangeVaults(c); err != nil {
		return err
	}
	g, seq, err := s.vault(ctx, c, r.PathValue("id"))
	if err != nil {
		return err
	}
	if body.DisplayName != nil {
		if err := checkName("display_name", *body.DisplayName, true); err != nil {
			return err
		}
		g.DisplayName = *body.DisplayName
	}
	if g.Metadata, err = patchMetadata(g.Metadata, body.Metadata); err != nil {
		return err
	}
	g.UpdatedAt = time.Now().UTC()
	if err := s.rewriteVault(ctx, c, g, seq); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, vaultJSON(g))
	return nil
}

// rewriteVault writes g over its record at seq.
func (s *Service) rewriteVault(ctx context.Context, c *caller, g egressapi.Group, seq uint64) error {
	err := writeRecord(ctx, c.js, egressapi.GroupKey(c.tenant, g.ID), g, seq)
	if bus.Conflict(err) {
		return &apiError{http.StatusConflict, wire.InvalidRequest, "vault " + g.ID + " changed meanwhile: try again"}
	}
	return err
}

// archiveVault answers POST /v1/vaults/{id}/archive: its credentials'
// secrets are dropped for good, and no session may name it any more.
func (s *Service) archiveVault(ctx context.Context, c *caller, w http.ResponseWriter, r *http.Request) error {
	if err := mayChangeVaults(c); err != nil {
		return err
	}
	g, seq, err := s.vault(ctx, c, r.PathValue("id"))
	if err != nil {
		return err
	}
	if g.ArchivedAt == nil {
		creds, err := s.credentials(ctx, c, g.ID)
		if err != nil {
			return err
		}
		for _, v := range creds {
			if v.ArchivedAt.IsZero() {
				if _, err := askVaults(ctx, c, egressapi.OpArchive, egressapi.VaultRequest{Vault: egressapi.Vault{Name: v.Name}}); err != nil {
					return err
				}
			}
		}
		now := time.Now().UTC()
		g.ArchivedAt, g.UpdatedAt = &now, now
		if err := s.rewriteVault(ctx, c, g, seq); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusOK, vaultJSON(g))
	return nil
}

// deleteVault answers DELETE /v1/vaults/{id}: its credentials are removed,
// then its record.
func (s *Service) deleteVault(ctx context.Context, c *caller, w http.ResponseWriter, r *http.Request) error {
	if err := mayChangeVaults(c); err != nil {
		return err
	}
	g, seq, err := s.vault(ctx, c, r.PathValue("id"))
	if err != nil {
		return err
	}
	creds, err := s.credentials(ctx, c, g.ID)
	if err != nil {
		return err
	}
	for _, v := range creds {
		if _, err := askVaults(ctx, c, egressapi.OpRemove, egressapi.VaultRequest{Vault: egressapi.Vault{Name: v.Name}}); err != nil && !isNotFound(err) {
			return err
		}
	}
	if err := deleteRecord(ctx, c.js, egressapi.GroupKey(c.tenant, g.ID), seq); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.Deleted{Type: "vault_deleted", ID: g.ID})
	return nil
}

// listVaults answers GET /v1/vaults: the tenant's vaults, oldest first, a
// page at a time.
func (s *Service) listVaults(ctx context.Context, c *caller, w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	recs, err := listRecords(ctx, c.js, egressapi.GroupKey(c.tenant, "*"))
	if err != nil {
		return err
	}
	archived := q.Get("include_archived") == "true"
	var all []egressapi.Group
	for key, data := range recs {
		var g egressapi.Group
		if json.Unmarshal(data, &g) == nil && key == egressapi.GroupKey(c.tenant, g.ID) && (archived || g.ArchivedAt == nil) {
			all = append(all, g)
		}
	}
	slices.SortFunc(all, func(a, b egressapi.Group) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	page, err := pageOf(q, all, func(g egressapi.Group) string { return g.ID }, vaultJSON)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}

// pageOf returns the page of all (in order) that q's limit and page (the
// ID of the last item of the page before) ask for, each item shown by
// show.
func pageOf[T, W any](q url.Values, all []T, id func(T) string, show func(T) W) (wire.Page[W], error) {
	n, err := limit(q, defaultLimit)
	if err != nil {
		return wire.Page[W]{}, err
	}
	start := 0
	if p := q.Get("page"); p != "" {
		i := slices.IndexFunc(all, func(t T) bool { return id(t) == p })
		if i < 0 {
			return wire.Page[W]{}, badRequest("page=%q: not a page of this list", p)
		}
		start = i + 1
	}
	page := wire.Page[W]{Data: []W{}}
	for _, t := range all[start:min(start+n, len(all))] {
		page.Data = append(page.Data, show(t))
	}
	if end := start + n; end < len(all) {
		next := id(all[end-1])
		page.NextPage = &next
	}
	return page, nil
}

// deleteRecord deletes the record key through js, on the condition that
// its last write is at sequence after.
func deleteRecord(ctx context.Context, js jetstream.JetStream, key string, after uint64) error {
	ctx, cancel := bus.Bound(ctx)
	defer cancel()
	subject := recordSubject(key)
	ctx, stop := bus.WhilePermitted(ctx, js.Conn(), subject)
	defer stop()
	msg := &nats.Msg{Subject: subject, Header: nats.Header{"KV-Operation": []string{"DEL"}}}
	if _, err := js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(after)); err != nil {
		// A full bucket refuses a delete's marker too.
		return storeRefusal(key, 0, bus.Refusal(ctx, err))
	}
	return nil
}
