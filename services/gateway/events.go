package gateway

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"slices"
	"sort"

	"github.com/google/uuid"

	"corral.dev/services/gateway/internal/wire"
)

// listEvents answers GET /v1/sessions/{id}/events: the session's events,
// oldest first (order=desc: newest first), a page at a time; next_page
// is the cursor of the page's last event. The events come from the
// session's fold (see [foldCache]): a page costs what it returns.
func (s *Service) listEvents(ctx context.Context, c *caller, w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if _, _, err := s.session(ctx, c, id); err != nil {
		return err
	}
	q := r.URL.Query()
	n, err := limit(q, maxLimit)
	if err != nil {
		return err
	}
	created, err := readTimeFilter(q, "created_at")
	if err != nil {
		return err
	}
	types := values(q, "types")
	var after *wire.Cursor
	if p := q.Get("page"); p != "" {
		cur, err := wire.ParseCursor(p)
		if err != nil {
			return badRequest("page: %v", err)
		}
		after = &cur
	}
	v, err := s.folded(ctx, c, uuid.MustParse(id), false)
	if err != nil {
		return err
	}
	keep := func(ev wire.Event) bool {
		return (len(types) == 0 || slices.Contains(types, ev.Type)) && created.keeps(*ev.ProcessedAt)
	}
	writeJSON(w, http.StatusOK, eventPage(v.events, after, q.Get("order") == "desc", n, keep))
	return nil
}

// eventPage returns the page of all (in the log's order) of at most n events
// that keep keeps, after the cursor after (before it, for desc, which
// reads newest first), found by a binary search: the page costs what it
// holds and what it skips.
func eventPage(all []wire.Event, after *wire.Cursor, desc bool, n int, keep func(wire.Event) bool) wire.Page[wire.Event] {
	i, step := 0, 1
	if desc {
		i, step = len(all)-1, -1
	}
	if after != nil {
		// The first event past the cursor, read forwards.
		i = sort.Search(len(all), func(k int) bool { return after.Before(all[k].Cursor) })
		if desc {
			// The last event before it.
			i = sort.Search(len(all), func(k int) bool { return !all[k].Cursor.Before(*after) }) - 1
		}
	}
	page := wire.Page[wire.Event]{Data: []wire.Event{}}
	for ; i >= 0 && i < len(all); i += step {
		if !keep(all[i]) {
			continue
		}
		if len(page.Data) == n {
			next := page.Data[n-1].Cursor.String()
			page.NextPage = &next
			break
		}
		page.Data = append(page.Data, all[i])
	}
	return page
}

// streamEvents answers GET /v1/sessions/{id}/events/stream: the session's
// events as server-sent events, each with its ID as the SSE id, from now
// on, or from after the event a Last-Event-ID header names (the ID of the
// event a client saw last), until the client goes; with event_deltas,
// previews of the events named as the model writes them (see
// [previews]).
func (s *Service) streamEvents(ctx context.Context, c *caller, w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if _, _, err := s.session(ctx, c, id); err != nil {
		return err
	}
	want, err := deltaTypes(r.URL.Query())
	if err != nil {
		return err
	}
	session := uuid.MustParse(id)
	st := newStream(s.cfg.Heartbeat, cmp.Or(s.cfg.MaxBehind, defaultMaxBehind))
	if len(want) > 0 {
		// Heard from before the log is read: a piece written while it
		// is has somewhere to go.
		stop, err := st.hearLive(c, session)
		if err != nil {
			return err
		}
		defer stop()
	}
	v, err := s.folded(ctx, c, session, true)
	if err != nil {
		return err
	}
	var missed []wire.Event
	if h := r.Header.Get("Last-Event-ID"); h != "" {
		resume, err := resumePoint(v.events, h)
		if err != nil {
			return badRequest("Last-Event-ID %q: no event of session %s", h, id)
		}
		missed = v.events[sort.Search(len(v.events), func(k int) bool { return resume.Before(v.events[k].Cursor) }):]
	}
	out, err := newSSE(w)
	if err != nil {
		return err
	}
	if len(want) > 0 {
		st.previews = newPreviews(session, want, v.turn)
	}
	for _, ev := range missed {
		out.event(ev)
	}
	if out.flush() != nil {
		return nil // the client went away
	}
	err = st.follow(ctx, c, v, out)
	switch {
	case errors.Is(err, errLagged):
		out.end(wire.Overloaded, err.Error()+resumeHint(out.lastID))
	case err != nil && ctx.Err() == nil:
		// The answer has begun: say in the stream itself that it ends,
		// and why only in the log.
		rid := w.Header().Get("request-id")
		s.log.WarnContext(ctx, "event stream failed", "session", session, "request_id", rid, "err", err)
		out.end(wire.APIError, internalMessage(rid))
	}
	return nil
}

// resumePoint returns where the event a client saw last is among evs: by
// its ID (what an SDK hands back, and what a browser's EventSource sends),
// looked for from the newest, or by its cursor.
func resumePoint(evs []wire.Event, h string) (wire.Cursor, error) {
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].ID == h {
			return evs[i].Cursor, nil
		}
	}
	return wire.ParseCursor(h)
}

// resumeHint tells a client whose stream ended how to go on.
func resumeHint(lastID string) string {
	if lastID == "" {
		return "; open it again"
	}
	return "; open it again with the header Last-Event-ID: " + lastID + " to go on from the last event sent"
}
