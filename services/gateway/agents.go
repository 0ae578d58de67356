package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"corral.dev/pkg/bus"
	"corral.dev/services/gateway/internal/wire"
)

// agentBody is the body of POST /v1/agents and of an update: every field
// the API has, so that none Corral cannot honour passes unnoticed.
type agentBody struct {
	Name              *string           `json:"name"`
	Description       *string           `json:"description"`
	Model             json.RawMessage   `json:"model"`
	System            *string           `json:"system"`
	Tools             []json.RawMessage `json:"tools"`
	MCPServers        []json.RawMessage `json:"mcp_servers"`
	Skills            []json.RawMessage `json:"skills"`
	Metadata          map[string]string `json:"metadata"`
	Multiagent        json.RawMessage   `json:"multiagent"`
	ExecutionIdentity json.RawMessage   `json:"execution_identity"`
	// Version, on an update, is the version the update is of.
	Version *int `json:"version"`
}

// apply sets in a what b says, and refuses what Corral cannot honour.
func (b *agentBody) apply(a *agentRecord) error {
	switch {
	case len(b.MCPServers) > 0:
		return unsupported("mcp_servers: MCP servers")
	case len(b.Skills) > 0:
		return unsupported("skills: the API's skills (a tenant's skills are folders under /skills: corral skills push)")
	case present(b.Multiagent):
		return unsupported("multiagent: agents calling agents")
	case present(b.ExecutionIdentity):
		return unsupported("execution_identity")
	}
	if b.Name != nil {
		a.Name = *b.Name
	}
	if b.Description != nil {
		a.Description = *b.Description
	}
	if b.Metadata != nil {
		a.Metadata = b.Metadata
	}
	if present(b.Model) {
		id, err := modelID(b.Model)
		if err != nil {
			return err
		}
		a.ModelID, a.Model = id, corralModel(id)
	}
	if b.System != nil {
		// Added to Corral's system prompt, which still names the tools,
		// /memories and /skills; "" clears it.
		if err := checkSystem(*b.System); err != nil {
			return err
		}
		a.System = *b.System
	}
	if b.Tools != nil {
		tools, ask, err := readToolset(b.Tools)
		if err != nil {
			return err
		}
		a.Tools, a.Ask = tools, ask
	}
	switch {
	case strings.TrimSpace(a.Name) == "":
		return badRequest("name: an agent needs a name")
	case a.Model == "":
		return badRequest("model: an agent needs a model")
	}
	// Bounded as the API bounds them, so that an agent's record, and a
	// session's, which holds it, fit in a record (maxRecordBytes).
	if err := checkName("name", a.Name, true); err != nil {
		return err
	}
	if len(a.Description) > maxDescription {
		return badRequest("description: at most %d bytes", maxDescription)
	}
	return checkMetadata(a.Metadata)
}

// maxDescription bounds an agent's description, in bytes.
const maxDescription = 2048

// checkMetadata checks md against the API's bounds on metadata.
func checkMetadata(md map[string]string) error {
	patch := make(map[string]*string, len(md))
	for k, v := range md {
		patch[k] = &v
	}
	_, err := patchMetadata(nil, patch)
	return err
}

// modelID reads an agent's model: its ID, or {"id": ...}.
func modelID(raw json.RawMessage) (string, error) {
	var id string
	if json.Unmarshal(raw, &id) == nil {
		return id, nil
	}
	var cfg struct {
		ID           string          `json:"id"`
		Effort       json.RawMessage `json:"effort"`
		Speed        json.RawMessage `json:"speed"`
		InferenceGeo json.RawMessage `json:"inference_geo"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil || cfg.ID == "" {
		return "", badRequest("model: want a model's ID, or {\"id\": ...}")
	}
	if err := strict(raw, &cfg); err != nil {
		return "", prefixed(err, "model: ")
	}
	for name, v := range map[string]json.RawMessage{"effort": cfg.Effort, "speed": cfg.Speed, "inference_geo": cfg.InferenceGeo} {
		if present(v) {
			return "", unsupported("model.%s", name)
		}
	}
	return cfg.ID, nil
}

// corralModel is the model Corral runs for the API's model id: as it is
// when it names its provider (openai:gpt-4.1, or any provider the harness
// has), else an Anthropic model.
func corralModel(id string) string {
	if strings.Contains(id, ":") {
		return id
	}
	return "anthropic:" + id
}

// prefixed returns err with prefix before its message, keeping its kind.
func prefixed(err error, prefix string) error {
	var ae *apiError
	if errors.As(err, &ae) {
		p := *ae
		p.msg = prefix + ae.msg
		return &p
	}
	return err
}

// agentJSON is an agent as the API shows it.
func agentJSON(a agentRecord) wire.Agent {
	md := a.Metadata
	if md == nil {
		md = map[string]string{}
	}
	return wire.Agent{
		Type: "agent", ID: a.ID, Version: a.Version, Name: a.Name, Description: a.Description,
		Model: wire.ModelConfig{ID: a.ModelID}, System: a.System, Tools: []wire.Toolset{toolsetJSON(a.Tools, a.Ask)}, MCPServers: []any{}, Skills: []any{},
		Metadata: md, CreatedAt: a.CreatedAt, UpdatedAt: a.UpdatedAt, ArchivedAt: a.ArchivedAt,
	}
}

// createAgent answers POST /v1/agents.
func (s *Service) createAgent(ctx context.Context, c *caller, w http.ResponseWriter, r *http.Request) error {
	var body agentBody
	if err := decode(w, r, &body); err != nil {
		return err
	}
	if body.Version != nil {
		return badRequest("version: a new agent has none")
	}
	now := time.Now().UTC()
	a := agentRecord{ID: newAgentID(c.user), Version: 1, CreatedAt: now, UpdatedAt: now}
	if err := body.apply(&a); err != nil {
		return err
	}
	if err := writeRecord(ctx, c.js, agentKey(c.tenant, a.ID), a, 0); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, agentJSON(a))
	return nil
}

// agent returns c's tenant's agent id and the sequence of its record: one
// read, of the key its ID names (see agentKey). A record whose ID is not
// its key's was not written by the gateway, and is not found.
func (s *Service) agent(ctx context.Context, c *caller, id string) (agentRecord, uint64, error) {
	if _, ok := agentOwner(id); !ok {
		return agentRecord{}, 0, notFound("no agent %q", id)
	}
	var a agentRecord
	seq, err := readRecord(ctx, c.js, agentKey(c.tenant, id), &a)
	if errors.Is(err, errNoRecord) || err == nil && a.ID != id {
		return agentRecord{}, 0, notFound("no agent %s", id)
	}
	return a, seq, err
}

// validID reports whether id may name a record: one subject token.
func validID(id string) bool {
	return id != "" && len(id) <= 128 && !strings.ContainsAny(id, ".*> \t\r\n")
}

// getAgent answers GET /v1/agents/{id}.
func (s *Service) getAgent(ctx context.Context, c *caller, w http.ResponseWriter, r *http.Request) error {
	a, _, err := s.agent(ctx, c, r.PathValue("id"))
	if err != nil {
		return err
	}
	if v := r.URL.Query().Get("version"); v != "" && v != strconv.Itoa(a.Version) {
		return unsupported("version %s of agent %s, not its latest (%d): reading an agent's earlier versions", v, a.ID, a.Version)
	}
	writeJSON(w, http.StatusOK, agentJSON(a))
	return nil
}

// updateAgent answers POST /v1/agents/{id}: a new version, on the
// condition that version is the agent's latest.
func (s *Service) updateAgent(ctx context.Context, c *caller, w http.ResponseWriter, r *http.Request) error {
	var body agentBody
	if err := decode(w, r, &body); err != nil {
		return err
	}
	a, seq, err := s.agent(ctx, c, r.PathValue("id"))
	if err != nil {
		return err
	}
	if err := mayChangeAgent(c, a.ID); err != nil {
		return err
	}
	if body.Version != nil && *body.Version != a.Version {
		return &apiError{http.StatusConflict, wire.InvalidRequest, "agent " + a.ID + " is at version " + strconv.Itoa(a.Version) + ", not " + strconv.Itoa(*body.Version)}
	}
	if err := body.apply(&a); err != nil {
		return err
	}
	a.Version++
	a.UpdatedAt = time.Now().UTC()
	err = writeRecord(ctx, c.js, agentKey(c.tenant, a.ID), a, seq)
	if bus.Conflict(err) {
		return &apiError{http.StatusConflict, wire.InvalidRequest, "agent " + a.ID + " changed meanwhile: read it again"}
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, agentJSON(a))
	return nil
}

// archiveAgent answers POST /v1/agents/{id}/archive: the agent starts no
// more sessions.
func (s *Service) archiveAgent(ctx context.Context, c *caller, w http.ResponseWriter, r *http.Request) error {
	a, seq, err := s.agent(ctx, c, r.PathValue("id"))
	if err != nil {
		return err
	}
	if err := mayChangeAgent(c, a.ID); err != nil {
		return err
	}
	if a.ArchivedAt == nil {
		now := time.Now().UTC()
		a.ArchivedAt, a.UpdatedAt = &now, now
		if err := writeRecord(ctx, c.js, agentKey(c.tenant, a.ID), a, seq); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusOK, agentJSON(a))
	return nil
}

// listAgents answers GET /v1/agents: the tenant's agents, oldest first, a
// page at a time (next_page is the last one's ID).
func (s *Service) listAgents(ctx context.Context, c *caller, w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	n, err := limit(q, defaultLimit)
	if err != nil {
		return err
	}
	created, err := readTimeFilter(q, "created_at")
	if err != nil {
		return err
	}
	recs, err := listRecords(ctx, c.js, recordKey(c.tenant, kindAgent, ">"))
	if err != nil {
		return err
	}
	archived := q.Get("include_archived") == "true"
	var all []agentRecord
	for key, data := range recs {
		var a agentRecord
		if json.Unmarshal(data, &a) != nil {
			continue
		}
		// Only a record under the key its ID names: any other was not
		// the gateway's (a user's key writing its own keys, say, a
		// record naming another's agent).
		if _, ok := agentOwner(a.ID); ok && key == agentKey(c.tenant, a.ID) && (archived || a.ArchivedAt == nil) && created.keeps(a.CreatedAt) {
			all = append(all, a)
		}
	}
	slices.SortFunc(all, func(a, b agentRecord) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	start := 0
	if p := q.Get("page"); p != "" {
		i := slices.IndexFunc(all, func(a agentRecord) bool { return a.ID == p })
		if i < 0 {
			return badRequest("page=%q: not a page of this list", p)
		}
		start = i + 1
	}
	page := wire.Page[wire.Agent]{Data: []wire.Agent{}}
	for _, a := range all[start:min(start+n, len(all))] {
		page.Data = append(page.Data, agentJSON(a))
	}
	if start+n < len(all) {
		next := page.Data[len(page.Data)-1].ID
		page.NextPage = &next
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}
