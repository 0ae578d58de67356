package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"time"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/environment"
	"corral.dev/pkg/environmentapi"
	"corral.dev/services/gateway/internal/wire"
)

// An environment of the API is a Corral environment of the tenant, its ID
// its name: what its sessions may reach (the hosts of a "limited"
// network), and the packages its layer installs. Anyone of the tenant may
// read them; creating, changing and removing one take a reviewer's or an
// operator's key, as corral environments does, since an environment
// decides what its sessions may reach on the network.

// environmentBody is the body of POST /v1/environments and of an update.
type environmentBody struct {
	Name        *string           `json:"name"`
	Description *string           `json:"description"`
	Config      json.RawMessage   `json:"config"`
	Metadata    map[string]string `json:"metadata"`
	Scope       *string           `json:"scope"`
}

// packageManagers are the presets "allow_package_managers" stands for.
var packageManagers = []string{"pypi", "npm", "go", "crates"}

// spec returns the Corral environment b defines, over the one it changes
// (nil for a new one).
func (b *environmentBody) spec(old *environment.Spec) (environment.Spec, error) {
	var sp environment.Spec
	if old != nil {
		sp = *old
	}
	switch {
	case len(b.Metadata) > 0:
		return sp, unsupported("metadata on an environment")
	case b.Scope != nil && *b.Scope != "" && *b.Scope != "workspace":
		return sp, unsupported("scope %q", *b.Scope)
	}
	if b.Name != nil {
		if old != nil && *b.Name != old.Name {
			return sp, unsupported("renaming an environment (its name is its ID)")
		}
		sp.Name = *b.Name
	}
	if b.Description != nil {
		sp.Description = *b.Description
	}
	if !present(b.Config) {
		return sp, nil
	}
	var cfg struct {
		Type     string `json:"type"`
		Packages *struct {
			Type  string   `json:"type"`
			Apt   []string `json:"apt"`
			Cargo []string `json:"cargo"`
			Gem   []string `json:"gem"`
			Go    []string `json:"go"`
			NPM   []string `json:"npm"`
			Pip   []string `json:"pip"`
		} `json:"packages"`
		Networking *struct {
			Type                 string   `json:"type"`
			AllowedHosts         []string `json:"allowed_hosts"`
			AllowPackageManagers bool     `json:"allow_package_managers"`
			AllowMCPServers      bool     `json:"allow_mcp_servers"`
		} `json:"networking"`
	}
	if err := json.Unmarshal(b.Config, &cfg); err != nil {
		return sp, badRequest("config: %v", err)
	}
	if cfg.Type != "" && cfg.Type != "cloud" {
		return sp, unsupported("config of type %q (an environment is Corral's own sandboxes)", cfg.Type)
	}
	if err := strict(b.Config, &cfg); err != nil {
		return sp, prefixed(err, "config: ")
	}
	if p := cfg.Packages; p != nil {
		switch {
		case len(p.Apt) > 0:
			return sp, unsupported("config.packages.apt (a sandbox's system is the host's, read-only)")
		case len(p.Cargo) > 0, len(p.Gem) > 0:
			return sp, unsupported("config.packages: cargo and gem packages (pip, npm and go are installed)")
		}
		sp.Packages = environment.Packages{Pip: p.Pip, NPM: p.NPM, Go: p.Go}
	}
	if n := cfg.Networking; n != nil {
		switch {
		case n.Type == "unrestricted":
			return sp, unsupported("config.networking unrestricted (an environment lists the hosts its sessions reach)")
		case n.Type != "" && n.Type != "limited":
			return sp, unsupported("config.networking of type %q", n.Type)
		case n.AllowMCPServers:
			return sp, unsupported("config.networking.allow_mcp_servers: MCP servers")
		}
		sp.Egress = environment.Egress{Hosts: n.AllowedHosts}
		if n.AllowPackageManagers {
			sp.Egress.Presets = packageManagers
		}
	}
	return sp, nil
}

// environmentJSON is an environment as the API shows it.
func environmentJSON(e environmentapi.Environment) wire.Environment {
	sp := e.Spec
	at := e.UpdatedAt.UTC().Format(time.RFC3339Nano)
	nonNil := func(s []string) []string {
		if s == nil {
			return []string{}
		}
		return s
	}
	return wire.Environment{
		Type: "environment", ID: sp.Name, Name: sp.Name, Description: sp.Description, Metadata: map[string]string{},
		Scope: "workspace", CreatedAt: at, UpdatedAt: at,
		Config: wire.EnvironmentConfig{
			Type: "cloud",
			Packages: wire.Packages{Type: "packages", Apt: []string{}, Cargo: []string{}, Gem: []string{},
				Go: nonNil(sp.Packages.Go), NPM: nonNil(sp.Packages.NPM), Pip: nonNil(sp.Packages.Pip)},
			Networking: wire.Networking{Type: "limited", AllowedHosts: nonNil(sp.Egress.Hosts),
				AllowPackageManagers: len(sp.Egress.Presets) > 0 && !slices.ContainsFunc(packageManagers, func(p string) bool { return !slices.Contains(sp.Egress.Presets, p) })},
		},
	}
}

// askEnvironments sends req for op to the environment API as c's client:
// reads as its user, changes on the tenant's own subject, which only a
// reviewer's or an operator's credential may publish on.
func askEnvironments(ctx context.Context, c *caller, op string, req environmentapi.Request) (environmentapi.Reply, error) {
	subject := environmentapi.Subject(c.tenant, c.user, op)
	if environmentapi.Writes(op) {
		subject = environmentapi.TenantSubject(c.tenant, op)
	}
	var reply environmentapi.Reply
	err := callAPI(ctx, c, subject, req, &reply)
	var se *serviceError
	switch {
	case errors.Is(err, bus.ErrRefused):
		return reply, &apiError{http.StatusForbidden, wire.Permission, "creating, changing and removing environments takes a reviewer's or an operator's key (corral credentials issue --reviewer): an environment decides what its sessions may reach on the network"}
	case errors.As(err, &se) && se.code == environmentapi.CodeNotFound:
		return reply, notFound("%s", se.desc)
	case errors.As(err, &se) && (se.code == environmentapi.CodeBadRequest || se.code == environmentapi.CodeForbidden):
		return reply, badRequest("%s", se.desc)
	}
	return reply, err
}

// environment returns c's tenant's environment name.
func (s *Service) environment(ctx context.Context, c *caller, name string) (environmentapi.Environment, error) {
	reply, err := askEnvironments(ctx, c, environmentapi.OpShow, environmentapi.Request{Name: name})
	if err != nil {
		return environmentapi.Environment{}, err
	}
	if reply.Environment == nil {
		return environmentapi.Environment{}, notFound("no environment %s", name)
	}
	return *reply.Environment, nil
}

// createEnvironment answers POST /v1/environments.
func (s *Service) createEnvironment(ctx context.Context, c *caller, w http.ResponseWriter, r *http.Request) error {
	var body environmentBody
	if err := decode(w, r, &body); err != nil {
		return err
	}
	sp, err := body.spec(nil)
	if err != nil {
		return err
	}
	return s.putEnvironment(ctx, c, w, sp)
}

func (s *Service) putEnvironment(ctx context.Context, c *caller, w http.ResponseWriter, sp environment.Spec) error {
	reply, err := askEnvironments(ctx, c, environmentapi.OpPut, environmentapi.Request{Spec: &sp})
	if err != nil {
		return err
	}
	if reply.Environment == nil {
		return errors.New("the environment API answered with no environment")
	}
	writeJSON(w, http.StatusOK, environmentJSON(*reply.Environment))
	return nil
}

// getEnvironment answers GET /v1/environments/{id}.
func (s *Service) getEnvironment(ctx context.Context, c *caller, w http.ResponseWriter, r *http.Request) error {
	e, err := s.environment(ctx, c, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, environmentJSON(e))
	return nil
}

// updateEnvironment answers POST /v1/environments/{id}.
func (s *Service) updateEnvironment(ctx context.Context, c *caller, w http.ResponseWriter, r *http.Request) error {
	var body environmentBody
	if err := decode(w, r, &body); err != nil {
		return err
	}
	e, err := s.environment(ctx, c, r.PathValue("id"))
	if err != nil {
		return err
	}
	sp, err := body.spec(&e.Spec)
	if err != nil {
		return err
	}
	return s.putEnvironment(ctx, c, w, sp)
}

// deleteEnvironment answers DELETE /v1/environments/{id}.
func (s *Service) deleteEnvironment(ctx context.Context, c *caller, w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if _, err := askEnvironments(ctx, c, environmentapi.OpRemove, environmentapi.Request{Name: id}); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.Deleted{Type: "environment_deleted", ID: id})
	return nil
}

// listEnvironments answers GET /v1/environments: every environment of
// the tenant, on one page.
func (s *Service) listEnvironments(ctx context.Context, c *caller, w http.ResponseWriter, r *http.Request) error {
	reply, err := askEnvironments(ctx, c, environmentapi.OpList, environmentapi.Request{})
	if err != nil {
		return err
	}
	page := wire.Page[wire.Environment]{Data: []wire.Environment{}}
	for _, e := range reply.Environments {
		page.Data = append(page.Data, environmentJSON(e))
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}
