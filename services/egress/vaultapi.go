package egress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/egressapi"
)

// serveVaults answers the vault API until ctx ends. A client creates,
// lists, rotates and removes its own vaults (a reviewer also the
// tenant's); no answer ever holds a secret.
func (s *Service) serveVaults(ctx context.Context) error {
	svc, err := micro.AddService(s.nc, micro.Config{
		Name:        "corral-vault",
		Version:     "1.0.0",
		Description: "the tenants' vaults: credentials egress injects into the sandboxes' requests",
	})
	if err != nil {
		return fmt.Errorf("vault api: %w", err)
	}
	for _, op := range []string{egressapi.OpCreate, egressapi.OpList, egressapi.OpRotate, egressapi.OpRemove, egressapi.OpUpdate, egressapi.OpArchive} {
		h := func(r micro.Request) {
			// Only the server's record says a request came from a client.
			if err := bus.Admit(r, s.cfg.Clients); err != nil {
				s.log.WarnContext(ctx, "vault api: refused", "subject", r.Subject(), "err", err)
				return
			}
			tenant, user, err := bus.APICaller(r.Subject(), "vault")
			if err != nil {
				_ = r.Error(egressapi.CodeBadRequest, err.Error(), nil)
				return
			}
			var req egressapi.VaultRequest
			if err := json.Unmarshal(r.Data(), &req); err != nil {
				_ = r.Error(egressapi.CodeBadRequest, "malformed request: "+err.Error(), nil)
				return
			}
			rctx, cancel := bus.Bound(ctx)
			defer cancel()
			reply, err := s.vaultOp(rctx, op, tenant, user, req)
			switch {
			case errors.Is(err, errInvalid):
				_ = r.Error(egressapi.CodeBadRequest, err.Error(), nil)
			case errors.Is(err, jetstream.ErrKeyNotFound):
				_ = r.Error(egressapi.CodeNotFound, fmt.Sprintf("no vault %q", req.Name), nil)
			case errors.Is(err, jetstream.ErrKeyExists):
				_ = r.Error(egressapi.CodeExists, fmt.Sprintf("vault %q exists: rotate its secret, or remove it first", req.Name), nil)
			case err != nil:
				s.log.WarnContext(rctx, "vault api", "op", op, "tenant", tenant, "err", err)
				_ = r.Error(egressapi.CodeInternal, err.Error(), nil)
			default:
				_ = r.RespondJSON(reply)
			}
		}
		if err := svc.AddEndpoint(op, micro.HandlerFunc(h), micro.WithEndpointSubject(bus.VaultAPI("*", "*", op))); err != nil {
			return fmt.Errorf("vault api: %w", err)
		}
	}
	<-ctx.Done()
	return svc.Stop()
}

// vaultOp does op for tenant's user ("" for the tenant's own vaults).
func (s *Service) vaultOp(ctx context.Context, op, tenant, user string, req egressapi.VaultRequest) (egressapi.VaultReply, error) {
	if op == egressapi.OpList {
		return egressapi.VaultReply{Vaults: s.vaults.list(tenant, user)}, nil
	}
	if err := check(req.Vault, req.Secret, op == egressapi.OpCreate); err != nil {
		return egressapi.VaultReply{}, err
	}
	key := vaultKey(tenant, user, req.Name)
	now := time.Now().UTC()
	switch op {
	case egressapi.OpCreate:
		if req.Group != "" && user != "" {
			return egressapi.VaultReply{}, fmt.Errorf("%w: vault %s: only the tenant's own vaults are credentials of a group", errInvalid, req.Name)
		}
		v := req.Vault
		v.User, v.Version, v.CreatedAt, v.UpdatedAt, v.RotatedAt, v.ArchivedAt = user, 1, now, now, time.Time{}, time.Time{}
		data, err := s.vaults.marshal(key, v, req.Secret)
		if err != nil {
			return egressapi.VaultReply{}, err
		}
		if _, err := s.vaults.kv.Create(ctx, key, data); err != nil {
			return egressapi.VaultReply{}, err
		}
		s.vaults.remember(key, data)
		s.log.InfoContext(ctx, "vault created", "tenant", tenant, "user", user, "vault", v.Name, "group", v.Group, "hosts", v.Hosts)
		return egressapi.VaultReply{Vault: &v}, nil
	case egressapi.OpRotate, egressapi.OpUpdate, egressapi.OpArchive:
		v, err := s.vaults.change(ctx, key, func(v *egressapi.Vault) (string, error) {
			if !v.ArchivedAt.IsZero() {
				return "", fmt.Errorf("%w: vault %s is archived: its secret is gone for good (make another)", errInvalid, v.Name)
			}
			v.UpdatedAt = now
			secret := req.Secret
			switch op {
			case egressapi.OpArchive:
				v.ArchivedAt, secret = now, ""
			case egressapi.OpUpdate:
				v.Label, v.Metadata = req.Label, req.Metadata
			}
			if op == egressapi.OpRotate || op == egressapi.OpUpdate && secret != "" {
				if err := checkSecret(secret); err != nil {
					return "", err
				}
				v.Version++
				v.RotatedAt = now
			}
			return secret, nil
		})
		if err != nil {
			return egressapi.VaultReply{}, err
		}
		s.log.InfoContext(ctx, "vault changed", "op", op, "tenant", tenant, "user", user, "vault", v.Name, "version", v.Version)
		return egressapi.VaultReply{Vault: &v}, nil
	default: // rm
		e, err := s.vaults.kv.Get(ctx, key)
		if err != nil {
			return egressapi.VaultReply{}, err
		}
		var old sealed
		_ = json.Unmarshal(e.Value(), &old)
		if err := s.vaults.kv.Purge(ctx, key, jetstream.LastRevision(e.Revision())); err != nil {
			return egressapi.VaultReply{}, fmt.Errorf("remove vault %s: %w", req.Name, err)
		}
		s.vaults.remember(key, nil)
		s.log.InfoContext(ctx, "vault removed", "tenant", tenant, "user", user, "vault", req.Name)
		return egressapi.VaultReply{Vault: &old.Vault}, nil
	}
}

// change applies edit to the vault kept under key, and keeps it with the
// secret edit returns: its old one for "", unless edit archived it (an
// archived vault keeps none).
func (v *vaults) change(ctx context.Context, key string, edit func(*egressapi.Vault) (string, error)) (egressapi.Vault, error) {
	e, err := v.kv.Get(ctx, key)
	if err != nil {
		return egressapi.Vault{}, err
	}
	var old sealed
	if err := json.Unmarshal(e.Value(), &old); err != nil {
		return egressapi.Vault{}, fmt.Errorf("vault %s: %w", key, err)
	}
	vault := old.Vault
	secret, err := edit(&vault)
	if err != nil {
		return egressapi.Vault{}, err
	}
	next := sealed{Vault: vault, Sealed: old.Sealed}
	switch {
	case !vault.ArchivedAt.IsZero():
		next.Sealed = nil
	case secret != "":
		next.Sealed = v.box.Seal(secret, key)
	}
	data, err := json.Marshal(next)
	if err != nil {
		return egressapi.Vault{}, err
	}
	if _, err := v.kv.Update(ctx, key, data, e.Revision()); err != nil {
		return egressapi.Vault{}, fmt.Errorf("change vault %s: %w", vault.Name, err)
	}
	v.remember(key, data)
	return vault, nil
}

// marshal seals secret into v as kept under key.
func (v *vaults) marshal(key string, vault egressapi.Vault, secret string) ([]byte, error) {
	return json.Marshal(sealed{Vault: vault, Sealed: v.box.Seal(secret, key)})
}

// remember puts what was just written under key (nil: removed) in the
// cache, ahead of the watch, so that this service's next answer has it.
func (v *vaults) remember(key string, data []byte) {
	v.mu.Lock()
	defer v.mu.Unlock()
	var s sealed
	if data == nil || json.Unmarshal(data, &s) != nil {
		delete(v.items, key)
		return
	}
	v.items[key] = &s
}

// list returns the vaults of tenant a client of user sees: the user's
// own and the tenant's (the tenant's alone for user ""), by name.
func (v *vaults) list(tenant, user string) []egressapi.Vault {
	<-v.synced
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []egressapi.Vault
	for k, s := range v.items {
		if strings.HasPrefix(k, tenant+".t.") || user != "" && strings.HasPrefix(k, vaultKey(tenant, user, "")) {
			out = append(out, s.Vault)
		}
	}
	slices.SortFunc(out, func(a, b egressapi.Vault) int {
		return strings.Compare(a.Name+"\x00"+a.User, b.Name+"\x00"+b.User)
	})
	return out
}
