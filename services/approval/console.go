package approval

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/sessionindex"
	"corral.dev/pkg/sessionlog"
)

// The sessions console: the sessions a person signed in to the page may
// see, live, and each session's timeline as it happens. Who sees what:
// a user (signed in with a user's credential) their own sessions; a
// reviewer signed in with a credential their tenant's; an operator, a
// reviewer token or the proxy every tenant's. What the model wrote is
// escaped by html/template like any text: never template.HTML.

// maxListed bounds the sessions a list shows, the latest first.
const maxListed = 500

func (w *web) console(mux *http.ServeMux) {
	mux.HandleFunc("GET /sessions", w.signedIn(w.sessions))
	mux.HandleFunc("GET /sessions/live", w.signedIn(w.sessionsLive))
	mux.HandleFunc("GET /sessions/{tenant}/{session}", w.signedIn(w.sessionPage))
	mux.HandleFunc("GET /sessions/{tenant}/{session}/live", w.signedIn(w.sessionLive))
	mux.HandleFunc("POST /sessions/{tenant}/{session}/stop", w.signedIn(w.checkCSRF(w.stop)))
	mux.HandleFunc("GET /sessions/{tenant}/{session}/workspace", w.signedIn(w.workspacePage))
	mux.HandleFunc("GET /sessions/{tenant}/{session}/workspace/file", w.signedIn(w.filePage))
}

// sessionPath is a session's page.
func sessionPath(tenant string, session uuid.UUID) string {
	return "/sessions/" + tenant + "/" + session.String()
}

// sees reports whether rv may see a session of tenant whose user is
// owner.
func (rv reviewer) sees(tenant, owner string) bool {
	if rv.tenant != "" && tenant != rv.tenant {
		return false
	}
	return !rv.user || owner == rv.name
}

// listFilter is what a list of sessions keeps, from its query.
type listFilter struct {
	Status sessionindex.Status
	User   string
}

func parseFilter(r *http.Request) (listFilter, error) {
	var f listFilter
	q := r.URL.Query()
	for k := range q {
		if k != "status" && k != "user" {
			return f, fmt.Errorf("unknown filter %q: filter by status or user", k)
		}
	}
	if s := q.Get("status"); s != "" {
		st, err := sessionindex.CheckStatus(s)
		if err != nil {
			return f, err
		}
		f.Status = st
	}
	f.User = strings.TrimSpace(q.Get("user"))
	return f, nil
}

// listView is what the sessions list shows.
type listView struct {
	Reviewer string
	Tenant   string
	User     bool
	CSRF     string
	Filter   listFilter
	Statuses []sessionindex.Status
	Sessions []sessionindex.Entry
	More     int
	Error    string
}

func (w *web) listView(rv reviewer, f listFilter) listView {
	v := listView{Reviewer: rv.name, Tenant: rv.tenant, User: rv.user, CSRF: w.csrf(rv), Filter: f, Statuses: sessionindex.Statuses()}
	if w.s.index == nil {
		v.Error = "This server has no session index: the gateway keeps it, in the bucket corral setup makes."
		return v
	}
	all := w.s.index.list(func(e sessionindex.Entry) bool {
		return rv.sees(e.Tenant, e.User) && (f.Status == "" || e.Status == f.Status) && (f.User == "" || e.User == f.User)
	})
	if len(all) > maxListed {
		v.More, all = len(all)-maxListed, all[:maxListed]
	}
	v.Sessions = all
	return v
}

func (w *web) sessions(rw http.ResponseWriter, r *http.Request, rv reviewer) {
	f, err := parseFilter(r)
	if err != nil {
		v := w.listView(rv, listFilter{})
		v.Error = "The filter is not one this page knows: " + err.Error() + "."
		w.render(rw, http.StatusBadRequest, "sessions.html", v)
		return
	}
	w.render(rw, http.StatusOK, "sessions.html", w.listView(rv, f))
}

// sessionsLive streams the list's rows as server-sent events, whenever
// the index changes.
func (w *web) sessionsLive(rw http.ResponseWriter, r *http.Request, rv reviewer) {
	f, err := parseFilter(r)
	if err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	if w.s.index == nil {
		http.Error(rw, "no session index on this server", http.StatusNotFound)
		return
	}
	sse, ok := startSSE(rw)
	if !ok {
		return
	}
	for {
		changed := w.s.index.updates()
		var buf bytes.Buffer
		if err := pages.ExecuteTemplate(&buf, "session-rows", w.listView(rv, f)); err != nil {
			w.s.log.Error("render sessions", "err", err)
			return
		}
		if !sse.send("update", buf.String()) || !sse.wait(r.Context(), changed) {
			return
		}
	}
}

// sessionView is what a session's page shows.
type sessionView struct {
	Reviewer string
	Tenant   string
	User     bool
	CSRF     string
	Session  uuid.UUID
	Owner    string
	Entry    sessionindex.Entry
	Indexed  bool
	Ended    bool
	Steps    []*step
	// Changes is what the workspace changed, as its last snapshot said.
	Changes *event.Changes
	// Seq is the stream sequence of the last event shown, from which the
	// live timeline goes on.
	Seq     uint64
	Decides bool
	Path    string
	Message string
}

// session reads a session's log for rv: an error wrapping ErrNotFound for
// a session rv may not see, as for one that does not exist.
func (w *web) session(ctx context.Context, r *http.Request, rv reviewer) (string, uuid.UUID, []sessionlog.Entry, *sessionlog.Session, error) {
	tenant := r.PathValue("tenant")
	session, err := uuid.Parse(r.PathValue("session"))
	if err != nil || event.CheckTenant(tenant) != nil || session.String() != r.PathValue("session") {
		return "", uuid.Nil, nil, nil, fmt.Errorf("%w: the address names no tenant and session", ErrNotFound)
	}
	if rv.tenant != "" && tenant != rv.tenant {
		return "", uuid.Nil, nil, nil, ErrNotFound
	}
	entries, sess, err := w.s.console.ReadAll(ctx, tenant, session)
	if err != nil {
		return "", uuid.Nil, nil, nil, err
	}
	if len(entries) == 0 || !rv.sees(tenant, sess.User()) {
		return "", uuid.Nil, nil, nil, ErrNotFound
	}
	return tenant, session, entries, sess, nil
}

func (w *web) notFound(rw http.ResponseWriter, err error) {
	if errors.Is(err, ErrNotFound) {
		http.Error(rw, "There is no such session, or it is not one you may see.", http.StatusNotFound)
		return
	}
	w.s.log.Error("read session", "err", err)
	http.Error(rw, "The session's log cannot be read now; try again.", http.StatusServiceUnavailable)
}

func (w *web) sessionPage(rw http.ResponseWriter, r *http.Request, rv reviewer) {
	tenant, session, entries, sess, err := w.session(r.Context(), r, rv)
	if err != nil {
		w.notFound(rw, err)
		return
	}
	v := sessionView{
		Reviewer: rv.name, Tenant: rv.tenant, User: rv.user, CSRF: w.csrf(rv), Session: session, Owner: sess.User(),
		Steps:   newTimeline(w.s.cfg.Prices.Cost).steps(entries),
		Seq:     entries[len(entries)-1].Seq,
		Decides: rv.mayDecide(),
		Path:    sessionPath(tenant, session),
		Message: r.URL.Query().Get("done"),
	}
	v.Entry.Tenant = tenant
	if w.s.index != nil {
		if e, ok := w.s.index.get(tenant, session); ok {
			v.Entry, v.Indexed = e, true
		}
	}
	for _, en := range entries {
		switch en.Event.(type) {
		case *event.SessionRequested:
			v.Ended = false
		case *event.SessionCompleted, *event.SessionFailed, *event.SessionStopped:
			v.Ended = true
		}
		switch e := en.Event.(type) {
		case *event.ToolCompleted:
			v.Changes = cmp.Or(e.Changes, v.Changes)
		case *event.SessionCompleted:
			v.Changes = cmp.Or(e.Changes, v.Changes)
		}
	}
	w.render(rw, http.StatusOK, "session.html", v)
}

// stopNamespace is the UUID namespace of the console's stops, derived
// from the session and the last event of its log, as corral stop derives
// its own: a stop sent twice for the same stretch of the log is one.
var stopNamespace = uuid.MustParse("3f0b7c52-3c37-4be6-9a35-7a1f0e6c2d41")

// stop asks the harness to stop a session rv may see: a stop on the
// console's request subject, which only this service may publish and the
// harness takes stops alone from, recorded as stopped by rv. The page shows the stop when the harness has recorded it.
func (w *web) stop(rw http.ResponseWriter, r *http.Request, rv reviewer) {
	tenant, session, entries, _, err := w.session(r.Context(), r, rv)
	if err != nil {
		w.notFound(rw, err)
		return
	}
	last := entries[len(entries)-1]
	switch last.Event.(type) {
	case *event.SessionCompleted, *event.SessionFailed, *event.SessionStopped:
		http.Redirect(rw, r, sessionPath(tenant, session)+"?done=it+had+ended+already", http.StatusSeeOther)
		return
	}
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	ev := event.SessionStopped{Header: event.NewHeader(event.TypeSessionStopped, tenant, session), By: rv.name, Reason: cmp.Or(reason, "stopped from the sessions console")}
	ev.ID = uuid.NewSHA1(stopNamespace, fmt.Appendf(nil, "%s:stopped:%d", bus.SessionKey(tenant, session), last.Seq))
	// A random message ID: the requests stream drops a message whose ID
	// it has seen, whoever sent it, and a client could work the event's
	// out. The harness records the event once by its own ID.
	if err := bus.Publish(r.Context(), w.s.js, bus.ConsoleStopSubject(tenant, session), uuid.NewString(), &ev); err != nil {
		w.s.log.Error("stop session", "tenant", tenant, "session", session, "err", err)
		http.Error(rw, "The stop could not be sent now; try again.", http.StatusServiceUnavailable)
		return
	}
	w.s.log.Info("session stopped from the console", "tenant", tenant, "session", session, "by", rv.name)
	http.Redirect(rw, r, sessionPath(tenant, session)+"?done=stop+sent", http.StatusSeeOther)
}
