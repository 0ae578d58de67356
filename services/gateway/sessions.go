package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
	"corral.dev/pkg/event"
	"corral.dev/pkg/sessionindex"
	"corral.dev/services/gateway/internal/wire"
)

// newSession is the body of POST /v1/sessions.
type newSession struct {
	Agent         json.RawMessage   `json:"agent"`
	EnvironmentID string            `json:"environment_id"`
	Title         *string           `json:"title"`
	Metadata      map[string]string `json:"metadata"`
	InitialEvents []json.RawMessage `json:"initial_events"`
	Resources     []json.RawMessage `json:"resources"`
	VaultIDs      []string          `json:"vault_ids"`
	Budget        json.RawMessage   `json:"budget"`
}

// createSession makes a session of an agent: its record, then a request
// for each of its initial messages, as corral run publishes one.
func (s *Service) createSession(ctx context.Context, c *caller, w http.ResponseWriter, r *http.Request) error {
	var body newSession
	if err := decode(w, r, &body); err != nil {
		return err
	}
	if err := s.sessionVaults(ctx, c, body.VaultIDs); err != nil {
		return err
	}
	agent, err := s.sessionAgent(ctx, c, body.Agent)
	if err != nil {
		return err
	}
	budget, limits, err := readBudget(body.Budget, agent.Model, s.cfg.Prices)
	if err != nil {
		return err
	}
	messages, err := initialMessages(body.InitialEvents)
	if err != nil {
		return err
	}
	rec := sessionRecord{
		ID: uuid.Must(uuid.NewV7()), Agent: agent, Environment: body.EnvironmentID, Resources: body.Resources,
		Title: deref(body.Title), Metadata: body.Metadata, User: c.user, CreatedAt: time.Now().UTC(),
		Started: len(messages) > 0, Budget: budget, Limits: limits,
		Vaults: body.VaultIDs,
	}
	if err := s.workspaceFrom(ctx, c, &rec, body.Resources); err != nil {
		return err
	}
	if rec.Environment != "" {
		if _, err := s.environment(ctx, c, rec.Environment); err != nil {
			return err
		}
	}
	if err := writeRecord(ctx, c.js, sessionKey(c.tenant, bus.UserToken(rec.User), rec.ID.String()), rec, 0); err != nil {
		return err
	}
	for i, m := range messages {
		if _, err := s.request(ctx, c, &rec, m, i == 0); err != nil {
			return err
		}
	}
	out := sessionJSON(c.tenant, &rec, nil)
	if len(messages) > 0 {
		out.Status = "running"
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// sessionAgent returns the agent a new session names: its ID, or
// {"type": "agent", "id", "version"} for its latest version.
func (s *Service) sessionAgent(ctx context.Context, c *caller, raw json.RawMessage) (agentRecord, error) {
	var ref struct {
		Type    string `json:"type"`
		ID      string `json:"id"`
		Version *int   `json:"version"`
	}
	if json.Unmarshal(raw, &ref.ID) != nil {
		if err := json.Unmarshal(raw, &ref); err != nil || ref.ID == "" {
			return agentRecord{}, badRequest("agent: want an agent's ID, or {\"type\": \"agent\", \"id\": ...}")
		}
		if ref.Type != "agent" {
			return agentRecord{}, unsupported("agent of type %q (overriding an agent's configuration for one session)", ref.Type)
		}
		if err := strict(raw, &ref); err != nil {
			return agentRecord{}, prefixed(err, "agent: ")
		}
	}
	if ref.ID == "" {
		return agentRecord{}, badRequest("agent: an agent's ID is required (POST /v1/agents makes one)")
	}
	a, _, err := s.agent(ctx, c, ref.ID)
	if err != nil {
		return agentRecord{}, err
	}
	if ref.Version != nil && *ref.Version != a.Version {
		return agentRecord{}, unsupported("agent version %d, not its latest (%d): running an agent's earlier version", *ref.Version, a.Version)
	}
	if a.ArchivedAt != nil {
		return agentRecord{}, badRequest("agent %s is archived: it starts no session", a.ID)
	}
	return a, nil
}

// initialMessages returns the text of each user.message of a new
// session's initial events.
func initialMessages(events []json.RawMessage) ([]string, error) {
	var out []string
	for i, raw := range events {
		var ev sentEvent
		if err := json.Unmarshal(raw, &ev); err != nil {
			return nil, badRequest("initial_events[%d]: %v", i, err)
		}
		if ev.Type != "user.message" {
			return nil, unsupported("initial_events[%d]: an event of type %q", i, ev.Type)
		}
		if err := strict(raw, &ev); err != nil {
			return nil, prefixed(err, fmt.Sprintf("initial_events[%d]: ", i))
		}
		text, err := ev.text()
		if err != nil {
			return nil, fmt.Errorf("initial_events[%d]: %w", i, err)
		}
		out = append(out, text)
	}
	return out, nil
}

// repository returns the repository a new session's workspace starts
// from, from its resources: one github_repository at most.
func repository(resources []json.RawMessage) (*event.Repo, error) {
	var repo *event.Repo
	for i, raw := range resources {
		var res struct {
			Type      string  `json:"type"`
			URL       string  `json:"url"`
			MountPath *string `json:"mount_path"`
			Checkout  *struct {
				Type string `json:"type"`
				Name string `json:"name"`
				SHA  string `json:"sha"`
			} `json:"checkout"`
			AuthorizationToken string `json:"authorization_token"`
		}
		if err := json.Unmarshal(raw, &res); err != nil {
			return nil, badRequest("resources[%d]: %v", i, err)
		}
		switch {
		case res.Type != "github_repository":
			return nil, unsupported("resources[%d]: a resource of type %q (a session's workspace starts from a repository)", i, res.Type)
		case repo != nil:
			return nil, unsupported("resources[%d]: a second repository (a session's workspace starts from one)", i)
		case res.AuthorizationToken != "":
			return nil, unsupported("resources[%d]: authorization_token (put the forge's token in a vault, corral vaults create --host HOST: egress adds it, and no sandbox ever sees it)", i)
		case res.MountPath != nil && *res.MountPath != "/workspace":
			return nil, unsupported("resources[%d]: mount_path %q (the repository is checked out as /workspace)", i, *res.MountPath)
		}
		if err := strict(raw, &res); err != nil {
			return nil, prefixed(err, fmt.Sprintf("resources[%d]: ", i))
		}
		repo = &event.Repo{URL: res.URL}
		if co := res.Checkout; co != nil {
			repo.Ref = cmp.Or(co.Name, co.SHA)
		}
		if err := repo.Check(); err != nil {
			return nil, badRequest("resources[%d]: %v", i, err)
		}
	}
	return repo, nil
}

// getSession answers GET /v1/sessions/{id}.
func (s *Service) getSession(ctx context.Context, c *caller, w http.ResponseWriter, r *http.Request) error {
	rec, e, err := s.session(ctx, c, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sessionJSON(c.tenant, rec, e))
	return nil
}

// session returns the record and the index entry of the session id of
// c's tenant: either may be nil (a session started elsewhere has no
// record; one not indexed yet no entry), not both. The record is looked
// for among c's user's: a user's key reads no other's, and a bot's, a
// reviewer's or an operator's finds a session not indexed yet only as
// its user (x-corral-user), and an indexed one as the user the index
// names.
func (s *Service) session(ctx context.Context, c *caller, id string) (*sessionRecord, *sessionindex.Entry, error) {
	session, err := uuid.Parse(id)
	if err != nil || session.String() != id {
		return nil, nil, notFound("no session %q", id)
	}
	var entry *sessionindex.Entry
	e, ok, err := sessionindex.Get(ctx, c.js, c.tenant, session)
	if err != nil {
		return nil, nil, err
	}
	if ok {
		entry = &e
	}
	user := c.user
	if c.cred.Role != credential.RoleUser && entry != nil && entry.User != "" {
		user = entry.User
	}
	var rec *sessionRecord
	var r sessionRecord
	switch _, err := readRecord(ctx, c.js, sessionKey(c.tenant, bus.UserToken(user), id), &r); {
	case err == nil && r.User == user && r.ID == session:
		// Only a record that is its key's: any other was not the
		// gateway's.
		rec = &r
	case err != nil && !errors.Is(err, errNoRecord):
		return nil, nil, err
	}
	if rec == nil && entry == nil {
		// Maybe started a moment ago, and not indexed yet.
		last, err := lastSeq(ctx, c.js, c.tenant, session)
		if err != nil {
			return nil, nil, err
		}
		if last == 0 {
			return nil, nil, notFound("no session %s", id)
		}
		entry = &sessionindex.Entry{Tenant: c.tenant, Session: session, Status: sessionindex.Running}
	}
	return rec, entry, nil
}

// apiStatus is the API's status of a session the index says e of (nil:
// not indexed yet, so not started).
func apiStatus(e *sessionindex.Entry) string {
	if e == nil {
		return "idle"
	}
	switch e.Status {
	case sessionindex.Running:
		return "running"
	case sessionindex.Failed:
		return "terminated"
	}
	return "idle"
}

// sessionJSON is a session as the API shows it.
func sessionJSON(tenant string, rec *sessionRecord, e *sessionindex.Entry) wire.Session {
	out := wire.Session{
		Type: "session", Status: apiStatus(e), Metadata: map[string]string{}, Resources: []json.RawMessage{},
		VaultIDs: []string{}, OutcomeEvaluations: []any{},
	}
	if rec != nil {
		out.ID, out.Agent, out.Title = rec.ID.String(), agentJSON(rec.Agent), rec.Title
		out.EnvironmentID, out.CreatedAt, out.UpdatedAt = rec.Environment, rec.CreatedAt, rec.CreatedAt
		if rec.Metadata != nil {
			out.Metadata = rec.Metadata
		}
		if rec.Resources != nil {
			out.Resources = rec.Resources
		}
		if rec.Vaults != nil {
			out.VaultIDs = rec.Vaults
		}
		if rec.Budget != nil {
			out.Budget = rec.Budget
		}
	}
	if e != nil {
		out.ID = e.Session.String()
		if rec == nil {
			// Started elsewhere (corral run, a batch, Slack): its agent is
			// Corral's own, with the model of its last request.
			out.Agent = agentJSON(agentRecord{ID: "corral", Version: 1, Name: "corral", ModelID: e.Model, Model: e.Model, CreatedAt: e.Started, UpdatedAt: e.Started})
			out.Title, out.EnvironmentID, out.CreatedAt = e.Title, e.Environment, e.Started
		}
		out.Title = cmp.Or(out.Title, e.Title)
		out.UpdatedAt = e.LastEvent
		out.Stats.DurationSeconds = e.LastEvent.Sub(e.Started).Seconds()
		out.Usage = wire.Usage{InputTokens: e.InputTokens, OutputTokens: e.OutputTokens,
			ListCost: &wire.Money{Amount: strconv.FormatFloat(e.CostUSD, 'f', 6, 64), Currency: "USD"}}
	}
	return out
}

// defaultLimit and maxLimit bound a page.
const (
	defaultLimit = 20
	maxLimit     = 1000
)

// limit reads a list's ?limit=.
func limit(q url.Values, def int) (int, error) {
	s := q.Get("limit")
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxLimit {
		return 0, badRequest("limit=%q: want 1 to %d", s, maxLimit)
	}
	return n, nil
}

// values returns the values of an array parameter, sent as name or
// name[].
func values(q url.Values, name string) []string {
	var out []string
	for _, v := range append(q[name], q[name+"[]"]...) {
		out = append(out, strings.Split(v, ",")...)
	}
	return out
}

// timeFilter is a list's created_at[gt|gte|lt|lte] parameters.
type timeFilter struct{ gt, gte, lt, lte time.Time }

func readTimeFilter(q url.Values, name string) (timeFilter, error) {
	var f timeFilter
	for _, p := range []struct {
		op string
		t  *time.Time
	}{{"gt", &f.gt}, {"gte", &f.gte}, {"lt", &f.lt}, {"lte", &f.lte}} {
		key := name + "[" + p.op + "]"
		if v := q.Get(key); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return f, badRequest("%s=%q: want an RFC 3339 time", key, v)
			}
			*p.t = t
		}
	}
	return f, nil
}

func (f timeFilter) keeps(t time.Time) bool {
	return (f.gt.IsZero() || t.After(f.gt)) && (f.gte.IsZero() || !t.Before(f.gte)) &&
		(f.lt.IsZero() || t.Before(f.lt)) && (f.lte.IsZero() || !t.After(f.lte))
}

// listSessions answers GET /v1/sessions: the tenant's sessions from the
// index, and those the API made that have no event yet, newest first
// (order=asc: oldest first), a page at a time.
func (s *Service) listSessions(ctx context.Context, c *caller, w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	for _, p := range []string{"deployment_id", "memory_store_id"} {
		if q.Get(p) != "" {
			return unsupported("filtering sessions by %s", p)
		}
	}
	n, err := limit(q, defaultLimit)
	if err != nil {
		return err
	}
	created, err := readTimeFilter(q, "created_at")
	if err != nil {
		return err
	}
	statuses := values(q, "statuses")
	for _, st := range statuses {
		if !slices.Contains([]string{"running", "idle", "terminated", "rescheduling"}, st) {
			return badRequest("statuses: %q is no status (running, idle, terminated, rescheduling)", st)
		}
	}
	entries, err := sessionindex.List(ctx, c.js, c.tenant)
	if err != nil {
		return err
	}
	// A user's key lists its own user's records alone; any other key
	// every user's of the tenant.
	users := "*"
	if c.cred.Role == credential.RoleUser {
		users = bus.UserToken(c.user)
	}
	recs, err := listRecords(ctx, c.js, sessionKey(c.tenant, users, "*"))
	if err != nil {
		return err
	}
	byID := make(map[string]*wire.Session)
	kept := make(map[string]*sessionRecord)
	for key, data := range recs {
		rec := new(sessionRecord)
		// Only a record that is its key's: any other was not the
		// gateway's.
		if json.Unmarshal(data, rec) == nil && key == sessionKey(c.tenant, bus.UserToken(rec.User), rec.ID.String()) {
			out := sessionJSON(c.tenant, rec, nil)
			byID[out.ID], kept[out.ID] = &out, rec
		}
	}
	for i := range entries {
		e := &entries[i]
		id := e.Session.String()
		rec := kept[id]
		out := sessionJSON(c.tenant, rec, e)
		byID[id] = &out
	}
	agentID := q.Get("agent_id")
	var all []wire.Session
	for _, ss := range byID {
		if created.keeps(ss.CreatedAt) && (len(statuses) == 0 || slices.Contains(statuses, ss.Status)) &&
			(agentID == "" || ss.Agent.ID == agentID) {
			all = append(all, *ss)
		}
	}
	asc := q.Get("order") == "asc"
	slices.SortFunc(all, func(a, b wire.Session) int {
		c := cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
		if asc {
			return c
		}
		return -c
	})
	start := 0
	if p := q.Get("page"); p != "" {
		i := slices.IndexFunc(all, func(ss wire.Session) bool { return ss.ID == p })
		if i < 0 {
			return badRequest("page=%q: not a page of this list", p)
		}
		start = i + 1
	}
	page := wire.Page[wire.Session]{Data: all[start:min(start+n, len(all))]}
	if start+n < len(all) {
		next := page.Data[len(page.Data)-1].ID
		page.NextPage = &next
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}

// request publishes a request of the session rec (or, for a session
// started elsewhere, sessionUser's) carrying text: the session's first
// (with what its workspace starts from) or a follow-up. It returns the
// request's ID.
func (s *Service) request(ctx context.Context, c *caller, rec *sessionRecord, text string, first bool) (uuid.UUID, error) {
	req := event.Request{
		Header: event.NewHeader(event.TypeRequest, c.tenant, rec.ID),
		User:   rec.User,
		Model:  rec.Agent.Model,
		Prompt: text,
	}
	if first {
		req.Environment, req.Repo, req.Files, req.Vaults = rec.Environment, rec.Repo, rec.Files, rec.Vaults
		req.SessionConfig = event.SessionConfig{System: rec.Agent.System, Tools: rec.Agent.Tools, Ask: rec.Agent.Ask, Budget: rec.Limits}
	}
	if err := bus.Publish(ctx, c.js, bus.RequestSubject(c.tenant, rec.ID, rec.User), req.ID.String(), &req); err != nil {
		return uuid.Nil, err
	}
	return req.ID, nil
}

// present reports whether raw holds a value other than null.
func present(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s != "" && s != "null"
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// lastSeq returns the stream sequence of the last event of a session's
// log, 0 for none.
func lastSeq(ctx context.Context, js jetstream.JetStream, tenant string, session uuid.UUID) (uint64, error) {
	m, err := bus.LastBySubject(ctx, js, bus.StreamEvents, bus.SessionEvents(tenant, session))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return m.StreamSeq, nil
}
