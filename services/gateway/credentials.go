package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/egressapi"
	"corral.dev/services/gateway/internal/wire"
)

// A credential of the API's vault is a Corral vault of the tenant (its ID
// the Corral vault's name) whose Group is the vault's ID. Corral holds
// one kind: a secret the egress service adds to the sandbox's requests to
// the hosts it binds, as a header or as HTTP basic authentication, the
// auth of type corral_host. The API's other kinds are refused: Corral
// offers no MCP servers (static_bearer, mcp_oauth), and never puts a
// secret's placeholder in a sandbox for egress to substitute
// (environment_variable).

// credentialBody is the body of POST /v1/vaults/{id}/credentials and of
// an update; auth is read by its type.
type credentialBody struct {
	DisplayName *string            `json:"display_name"`
	Metadata    map[string]*string `json:"metadata"`
	Auth        json.RawMessage    `json:"auth"`
}

// hostAuthBody is an auth of type corral_host as a client sends it. On
// an update, only secret_value may be given: where a secret goes stays
// what it was made with.
type hostAuthBody struct {
	Type         string   `json:"type"`
	AllowedHosts []string `json:"allowed_hosts"`
	PathPrefixes []string `json:"path_prefixes"`
	Header       string   `json:"header"`
	Prefix       string   `json:"prefix"`
	BasicUser    string   `json:"basic_user"`
	SecretValue  string   `json:"secret_value"`
}

// hostAuth reads raw, a credential's auth: of type corral_host, or
// refused saying why Corral has none of its type.
func hostAuth(raw json.RawMessage) (hostAuthBody, error) {
	var a hostAuthBody
	var probe struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil {
		return a, badRequest("auth: %v", err)
	}
	switch probe.Type {
	case wire.HostAuthType:
	case "static_bearer", "mcp_oauth":
		return a, unsupported("auth of type %s: a credential for an MCP server (Corral's agents use no MCP servers; a secret egress adds to a sandbox's requests to a host is auth of type %s)", probe.Type, wire.HostAuthType)
	case "environment_variable":
		return a, unsupported("auth of type environment_variable: a secret whose placeholder the sandbox sends for egress to substitute (Corral's sandboxes hold nothing of a secret: egress sets a header, or basic authentication, on the requests to the hosts a credential binds, auth of type %s)", wire.HostAuthType)
	default:
		return a, badRequest("auth: type %q is none Corral knows: want %s, with allowed_hosts, header (and prefix) or basic_user, and secret_value", probe.Type, wire.HostAuthType)
	}
	if err := strict(raw, &a); err != nil {
		return a, prefixed(err, "auth: ")
	}
	return a, nil
}

// askVault asks the vault API for op, which answers with the vault it
// made or changed.
func askVault(ctx context.Context, c *caller, op string, req egressapi.VaultRequest) (egressapi.Vault, error) {
	reply, err := askVaults(ctx, c, op, req)
	if err != nil {
		return egressapi.Vault{}, err
	}
	if reply.Vault == nil {
		return egressapi.Vault{}, errors.New("the vault API answered with no vault")
	}
	return *reply.Vault, nil
}

// askVaults sends req for op to the egress service's vault API as c's
// client: changes on the tenant's own subject, which only a reviewer's or
// an operator's credential may publish on, and lists as c's user (who
// sees the tenant's vaults, and its own).
func askVaults(ctx context.Context, c *caller, op string, req egressapi.VaultRequest) (egressapi.VaultReply, error) {
	subject := egressapi.TenantVaultSubject(c.tenant, op)
	if op == egressapi.OpList {
		subject = egressapi.VaultSubject(c.tenant, c.user, op)
	}
	var reply egressapi.VaultReply
	err := callAPI(ctx, c, subject, req, &reply)
	var se *serviceError
	switch {
	case errors.Is(err, bus.ErrRefused):
		return reply, &apiError{http.StatusForbidden, wire.Permission, "changing the tenant's vaults takes a reviewer's or an operator's key (corral credentials issue --reviewer)"}
	case errors.As(err, &se) && se.code == egressapi.CodeNotFound:
		return reply, notFound("%s", se.desc)
	case errors.As(err, &se) && se.code == egressapi.CodeExists:
		return reply, &apiError{http.StatusConflict, wire.InvalidRequest, se.desc}
	case errors.As(err, &se) && se.code == egressapi.CodeBadRequest:
		return reply, badRequest("%s", strings.TrimPrefix(se.desc, "invalid: "))
	}
	return reply, err
}

func isNotFound(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.status == http.StatusNotFound
}

// credentials returns the credentials of c's tenant's vault id, as the
// egress service has them, oldest first.
func (s *Service) credentials(ctx context.Context, c *caller, id string) ([]egressapi.Vault, error) {
	reply, err := askVaults(ctx, c, egressapi.OpList, egressapi.VaultRequest{})
	if err != nil {
		return nil, err
	}
	var out []egressapi.Vault
	for _, v := range reply.Vaults {
		if v.User == "" && v.Group == id {
			out = append(out, v)
		}
	}
	slices.SortFunc(out, func(a, b egressapi.Vault) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.Name, b.Name))
	})
	return out, nil
}

// credential returns credential cid of c's tenant's vault id.
func (s *Service) credential(ctx context.Context, c *caller, id, cid string) (egressapi.Vault, error) {
	if _, _, err := s.vault(ctx, c, id); err != nil {
		return egressapi.Vault{}, err
	}
	creds, err := s.credentials(ctx, c, id)
	if err != nil {
		return egressapi.Vault{}, err
	}
	i := slices.IndexFunc(creds, func(v egressapi.Vault) bool { return v.Name == cid })
	if i < 0 {
		return egressapi.Vault{}, notFound("no credential %q in vault %s", cid, id)
	}
	return creds[i], nil
}

// credentialJSON is a credential as the API shows it.
func credentialJSON(v egressapi.Vault) wire.Credential {
	out := wire.Credential{
		Type: "vault_credential", ID: v.Name, VaultID: v.Group, Metadata: orEmpty(v.Metadata),
		Auth: wire.HostAuth{Type: wire.HostAuthType, AllowedHosts: append([]string{}, v.Hosts...), PathPrefixes: append([]string{}, v.Paths...),
			Header: v.Inject.Header, Prefix: v.Inject.Prefix, BasicUser: v.Inject.BasicUser},
		CreatedAt: v.CreatedAt, UpdatedAt: cmp.Or(v.UpdatedAt, v.RotatedAt, v.CreatedAt),
	}
	if v.Label != "" {
		out.DisplayName = &v.Label
	}
	if !v.ArchivedAt.IsZero() {
		out.ArchivedAt = &v.ArchivedAt
	}
	return out
}

// createCredential answers POST /v1/vaults/{id}/credentials.
func (s *Service) createCredential(ctx context.Context, c *caller, w http.ResponseWriter, r *http.Request) error {
	var body credentialBody
	if err := decode(w, r, &body); err != nil {
		return err
	}
	if err := mayChangeVaults(c); err != nil {
		return err
	}
	if !present(body.Auth) {
		return badRequest("auth: required, of type %s", wire.HostAuthType)
	}
	a, err := hostAuth(body.Auth)
	if err != nil {
		return err
	}
	if err := checkName("display_name", deref(body.DisplayName), false); err != nil {
		return err
	}
	md, err := patchMetadata(nil, body.Metadata)
	if err != nil {
		return err
	}
	g, _, err := s.vault(ctx, c, r.PathValue("id"))
	if err != nil {
		return err
	}
	if g.ArchivedAt != nil {
		return badRequest("vault %s is archived: it takes no credential", g.ID)
	}
	v := egressapi.Vault{
		Name:  "vcrd_" + strings.ReplaceAll(uuid.Must(uuid.NewV7()).String(), "-", ""),
		Group: g.ID, Label: deref(body.DisplayName), Metadata: md, Hosts: a.AllowedHosts, Paths: a.PathPrefixes,
		Inject: egressapi.Injection{Header: a.Header, Prefix: a.Prefix, BasicUser: a.BasicUser},
	}
	made, err := askVault(ctx, c, egressapi.OpCreate, egressapi.VaultRequest{Vault: v, Secret: a.SecretValue})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, credentialJSON(made))
	return nil
}

// getCredential answers GET /v1/vaults/{id}/credentials/{cid}.
func (s *Service) getCredential(ctx context.Context, c *caller, w http.ResponseWriter, r *http.Request) error {
	v, err := s.credential(ctx, c, r.PathValue("id"), r.PathValue("cid"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, credentialJSON(v))
	return nil
}

// listCredentials answers GET /v1/vaults/{id}/credentials.
func (s *Service) listCredentials(ctx context.Context, c *caller, w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	g, _, err := s.vault(ctx, c, r.PathValue("id"))
	if err != nil {
		return err
	}
	creds, err := s.credentials(ctx, c, g.ID)
	if err != nil {
		return err
	}
	if q.Get("include_archived") != "true" {
		creds = slices.DeleteFunc(creds, func(v egressapi.Vault) bool { return !v.ArchivedAt.IsZero() })
	}
	page, err := pageOf(q, creds, func(v egressapi.Vault) string { return v.Name }, credentialJSON)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}

// updateCredential answers POST /v1/vaults/{id}/credentials/{cid}: its
// display name and metadata, and its secret.
func (s *Service) updateCredential(ctx context.Context, c *caller, w http.ResponseWriter, r *http.Request) error {
	var body credentialBody
	if err := decode(w, r, &body); err != nil {
		return err
	}
	if err := mayChangeVaults(c); err != nil {
		return err
	}
	var secret string
	if present(body.Auth) {
		a, err := hostAuth(body.Auth)
		if err != nil {
			return err
		}
		if a.AllowedHosts != nil || a.PathPrefixes != nil || a.Header != "" || a.Prefix != "" || a.BasicUser != "" {
			return unsupported("auth: changing where a credential's secret goes, or how (make a new credential, and delete this one)")
		}
		secret = a.SecretValue
	}
	v, err := s.credential(ctx, c, r.PathValue("id"), r.PathValue("cid"))
	if err != nil {
		return err
	}
	if body.DisplayName != nil {
		if err := checkName("display_name", *body.DisplayName, false); err != nil {
			return err
		}
		v.Label = *body.DisplayName
	}
	if v.Metadata, err = patchMetadata(v.Metadata, body.Metadata); err != nil {
		return err
	}
	changed, err := askVault(ctx, c, egressapi.OpUpdate, egressapi.VaultRequest{Vault: egressapi.Vault{Name: v.Name, Label: v.Label, Metadata: v.Metadata}, Secret: secret})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, credentialJSON(changed))
	return nil
}

// archiveCredential answers POST /v1/vaults/{id}/credentials/{cid}/archive:
// its secret is dropped for good; what it was stays listed.
func (s *Service) archiveCredential(ctx context.Context, c *caller, w http.ResponseWriter, r *http.Request) error {
	if err := mayChangeVaults(c); err != nil {
		return err
	}
	v, err := s.credential(ctx, c, r.PathValue("id"), r.PathValue("cid"))
	if err != nil {
		return err
	}
	if v.ArchivedAt.IsZero() {
		reply, err := askVaults(ctx, c, egressapi.OpArchive, egressapi.VaultRequest{Vault: egressapi.Vault{Name: v.Name}})
		if err != nil {
			return err
		}
		if reply.Vault != nil {
			v = *reply.Vault
		}
	}
	writeJSON(w, http.StatusOK, credentialJSON(v))
	return nil
}

// deleteCredential answers DELETE /v1/vaults/{id}/credentials/{cid}.
func (s *Service) deleteCredential(ctx context.Context, c *caller, w http.ResponseWriter, r *http.Request) error {
	if err := mayChangeVaults(c); err != nil {
		return err
	}
	v, err := s.credential(ctx, c, r.PathValue("id"), r.PathValue("cid"))
	if err != nil {
		return err
	}
	if _, err := askVaults(ctx, c, egressapi.OpRemove, egressapi.VaultRequest{Vault: egressapi.Vault{Name: v.Name}}); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.Deleted{Type: "vault_credential_deleted", ID: v.Name})
	return nil
}

// maxSessionVaults bounds the vaults a session names.
const maxSessionVaults = 16

// sessionVaults checks the vaults a new session names: each a vault of
// c's tenant, not archived. The harness checks them again when the
// session starts.
func (s *Service) sessionVaults(ctx context.Context, c *caller, ids []string) error {
	if len(ids) > maxSessionVaults {
		return badRequest("vault_ids: at most %d", maxSessionVaults)
	}
	for i, id := range ids {
		if slices.Contains(ids[:i], id) {
			return badRequest("vault_ids[%d]: %s is named twice", i, id)
		}
		g, _, err := s.vault(ctx, c, id)
		if err != nil {
			return prefixed(err, "vault_ids: ")
		}
		if g.ArchivedAt != nil {
			return badRequest("vault_ids[%d]: vault %s is archived", i, id)
		}
	}
	return nil
}
