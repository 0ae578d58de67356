package sandboxmanager

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/environment"
	"corral.dev/pkg/environmentapi"
)

// The environment API (package environmentapi) lets clients list, show,
// put, remove and choose the default of their tenant's environments in
// the bucket every service reads. Every node answers it, in the micro
// service's queue group. Reads come on a user's subject; changes only on
// the tenant's own, which the NATS permissions let only a reviewer's or an
// operator's credential reach: an environment decides what its sessions
// may reach on the network.

// apiError is an error the API answers with its code.
type apiError struct {
	code string
	msg  string
}

func (e *apiError) Error() string { return e.msg }

func apiErrorf(code, format string, args ...any) error {
	return &apiError{code: code, msg: fmt.Sprintf(format, args...)}
}

// serveEnvironments answers the environment API until ctx is done.
func (s *Service) serveEnvironments(ctx context.Context) error {
	svc, err := micro.AddService(s.js.Conn(), micro.Config{
		Name:        "corral-environment",
		Version:     "1.0.0",
		Description: "the tenants' environments: network, packages and setup of their sessions, for the corral CLI",
	})
	if err != nil {
		return fmt.Errorf("environment api: %w", err)
	}
	for _, op := range []string{environmentapi.OpList, environmentapi.OpShow, environmentapi.OpPut, environmentapi.OpRemove, environmentapi.OpDefault} {
		h := func(r micro.Request) {
			// Only the server's record says a request came from a client.
			if err := bus.Admit(r, s.cfg.Clients); err != nil {
				s.log.WarnContext(ctx, "environment api: refused", "subject", r.Subject(), "err", err)
				return
			}
			tenant, user, err := bus.APICaller(r.Subject(), "environment")
			if err != nil {
				_ = r.Error(environmentapi.CodeBadRequest, err.Error(), nil)
				return
			}
			if environmentapi.Writes(op) && user != "" {
				// The permissions let no user's credential publish there;
				// a subject naming a user is a read.
				_ = r.Error(environmentapi.CodeForbidden, "changing an environment takes a reviewer's or an operator's credential: it decides what its sessions may reach on the network", nil)
				return
			}
			var req environmentapi.Request
			dec := json.NewDecoder(bytes.NewReader(r.Data()))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&req); err != nil {
				_ = r.Error(environmentapi.CodeBadRequest, "malformed request: "+err.Error(), nil)
				return
			}
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			reply, err := s.environmentOp(rctx, op, tenant, req)
			var ae *apiError
			switch {
			case errors.As(err, &ae):
				_ = r.Error(ae.code, ae.msg, nil)
			case errors.Is(err, environment.ErrInvalid):
				_ = r.Error(environmentapi.CodeBadRequest, err.Error(), nil)
			case errors.Is(err, environmentapi.ErrUnknown):
				_ = r.Error(environmentapi.CodeNotFound, err.Error(), nil)
			case err != nil:
				s.log.WarnContext(rctx, "environment api", "op", op, "tenant", tenant, "err", err)
				_ = r.Error(environmentapi.CodeInternal, err.Error(), nil)
			default:
				_ = r.RespondJSON(reply)
			}
		}
		if err := svc.AddEndpoint(op, micro.HandlerFunc(h), micro.WithEndpointSubject(bus.EnvironmentAPI("*", "*", op))); err != nil {
			return fmt.Errorf("environment api: %w", err)
		}
	}
	<-ctx.Done()
	return svc.Stop()
}

// environmentOp does op for tenant.
func (s *Service) environmentOp(ctx context.Context, op, tenant string, req environmentapi.Request) (environmentapi.Reply, error) {
	kv := s.envs.kv
	switch op {
	case environmentapi.OpList:
		envs, def, err := environmentapi.List(ctx, kv, tenant)
		return environmentapi.Reply{Environments: envs, Default: def}, err
	case environmentapi.OpShow:
		e, _, err := environmentapi.Get(ctx, kv, tenant, req.Name)
		if err != nil {
			return environmentapi.Reply{}, err
		}
		def, _, err := environmentapi.Default(ctx, kv, tenant)
		return environmentapi.Reply{Environment: &environmentapi.Environment{Entry: e, Default: def == req.Name}, Default: def}, err
	case environmentapi.OpPut:
		return s.putEnvironment(ctx, tenant, req)
	case environmentapi.OpRemove:
		return s.removeEnvironment(ctx, tenant, req.Name)
	default:
		return s.defaultEnvironment(ctx, tenant, req.Name)
	}
}

// putEnvironment keeps req's definition as tenant's environment of its
// name, created or replaced: a definition the same as the one kept writes
// nothing. A replaced environment keeps its last build, of its version
// before; new sessions run in the new version, and build it first.
func (s *Service) putEnvironment(ctx context.Context, tenant string, req environmentapi.Request) (environmentapi.Reply, error) {
	if req.Spec == nil {
		return environmentapi.Reply{}, apiErrorf(environmentapi.CodeBadRequest, "put needs a definition (spec)")
	}
	spec := *req.Spec
	if err := spec.Validate(); err != nil {
		return environmentapi.Reply{}, err
	}
	e := environmentapi.Entry{Spec: spec, Version: spec.Version(), UpdatedAt: time.Now().UTC()}
	key := environmentapi.Key(tenant, spec.Name)
	outcome := ""
	for range 3 {
		old, rev, err := environmentapi.Get(ctx, s.envs.kv, tenant, spec.Name)
		switch {
		case errors.Is(err, environmentapi.ErrUnknown):
			outcome = environmentapi.Created
			err = s.writeEntry(ctx, key, &e, 0)
		case err != nil:
		case sameSpec(old.Spec, spec):
			outcome, e = environmentapi.Unchanged, old
		default:
			outcome, e.Built = environmentapi.Changed, old.Built
			err = s.writeEntry(ctx, key, &e, rev)
		}
		if bus.Conflict(err) {
			outcome = ""
			continue // written meanwhile: put over what it is now
		}
		if err != nil {
			return environmentapi.Reply{}, fmt.Errorf("put environment %s: %w", spec.Name, err)
		}
		break
	}
	if outcome == "" {
		return environmentapi.Reply{}, fmt.Errorf("put environment %s: it kept changing meanwhile", spec.Name)
	}
	if outcome != environmentapi.Unchanged {
		s.log.InfoContext(ctx, "environment "+outcome, "tenant", tenant, "environment", spec.Name, "version", e.Version)
	}
	def, _, err := environmentapi.Default(ctx, s.envs.kv, tenant)
	if err != nil {
		return environmentapi.Reply{}, err
	}
	if req.Default && def != spec.Name {
		if err := s.setDefault(ctx, tenant, spec.Name); err != nil {
			return environmentapi.Reply{}, err
		}
		def = spec.Name
	}
	return environmentapi.Reply{Environment: &environmentapi.Environment{Entry: e, Default: def == spec.Name}, Outcome: outcome, Default: def}, nil
}

// sameSpec reports whether a and b are one definition, as kept (the JSON
// of an empty list and of none are one).
func sameSpec(a, b environment.Spec) bool {
	ja, erra := json.Marshal(&a)
	jb, errb := json.Marshal(&b)
	return erra == nil && errb == nil && bytes.Equal(ja, jb)
}

// writeEntry writes e under key: created when rev is 0, else over
// revision rev.
func (s *Service) writeEntry(ctx context.Context, key string, e *environmentapi.Entry, rev uint64) error {
	data, err := json.Marshal(e)
	if err != nil {
		return err
	}
	rctx, cancel := bus.Bound(ctx)
	defer cancel()
	if rev == 0 {
		_, err = s.envs.kv.Create(rctx, key, data)
	} else {
		_, err = s.envs.kv.Update(rctx, key, data, rev)
	}
	return err
}

// removeEnvironment removes tenant's environment name and its history,
// and the tenant's default if it named it. Sessions running in it go on
// with its layer; egress lets their new sandboxes reach only what the
// policy allows.
func (s *Service) removeEnvironment(ctx context.Context, tenant, name string) (environmentapi.Reply, error) {
	e, rev, err := environmentapi.Get(ctx, s.envs.kv, tenant, name)
	if err != nil {
		return environmentapi.Reply{}, err
	}
	rctx, cancel := bus.Bound(ctx)
	defer cancel()
	if err := s.envs.kv.Purge(rctx, environmentapi.Key(tenant, name), jetstream.LastRevision(rev)); err != nil {
		return environmentapi.Reply{}, fmt.Errorf("remove environment %s: %w", name, err)
	}
	def, drev, err := environmentapi.Default(ctx, s.envs.kv, tenant)
	if err != nil {
		return environmentapi.Reply{}, err
	}
	wasDefault := def == name
	if wasDefault {
		if err := s.envs.kv.Purge(rctx, environmentapi.DefaultKey(tenant), jetstream.LastRevision(drev)); err != nil && !bus.Conflict(err) {
			return environmentapi.Reply{}, fmt.Errorf("remove environment %s as the default: %w", name, err)
		}
		def = ""
	}
	s.log.InfoContext(ctx, "environment removed", "tenant", tenant, "environment", name)
	return environmentapi.Reply{Environment: &environmentapi.Environment{Entry: e, Default: wasDefault}, Default: def}, nil
}

// defaultEnvironment makes name, one of tenant's environments, its
// default; "" leaves the tenant none.
func (s *Service) defaultEnvironment(ctx context.Context, tenant, name string) (environmentapi.Reply, error) {
	if name == "" {
		rctx, cancel := bus.Bound(ctx)
		defer cancel()
		if err := s.envs.kv.Purge(rctx, environmentapi.DefaultKey(tenant)); err != nil {
			return environmentapi.Reply{}, fmt.Errorf("clear the default environment: %w", err)
		}
		return environmentapi.Reply{}, nil
	}
	e, _, err := environmentapi.Get(ctx, s.envs.kv, tenant, name)
	if err != nil {
		return environmentapi.Reply{}, err
	}
	if err := s.setDefault(ctx, tenant, name); err != nil {
		return environmentapi.Reply{}, err
	}
	return environmentapi.Reply{Environment: &environmentapi.Environment{Entry: e, Default: true}, Default: name}, nil
}

// setDefault makes name tenant's default environment.
func (s *Service) setDefault(ctx context.Context, tenant, name string) error {
	data, err := json.Marshal(environmentapi.DefaultEntry{Name: name})
	if err != nil {
		return err
	}
	rctx, cancel := bus.Bound(ctx)
	defer cancel()
	if _, err := s.envs.kv.Put(rctx, environmentapi.DefaultKey(tenant), data); err != nil {
		return fmt.Errorf("make %s the default environment: %w", name, err)
	}
	s.log.InfoContext(ctx, "default environment", "tenant", tenant, "environment", name)
	return nil
}
