package approval

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"net/http"
	"net/url"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"corral.dev/pkg/event"
	"corral.dev/pkg/snapshot"
	"corral.dev/pkg/workspaceapi"
)

// A session's workspace in the console: the files of its last snapshot,
// each readable, and what they changed since the workspace was prepared.
// They are read from the snapshots' store (package snapshot) as the
// sandbox-manager reads them for corral workspace: nothing starts a
// sandbox, and a session whose node is gone reads the same. Who may see
// a session's workspace is who may see its timeline.

// Bounds of what a page shows: the rest is a corral workspace command
// away, which the page names. A page that takes longer than readFor to
// read says so.
const (
	maxEntriesShown = 2000
	maxPatchShown   = 1 << 20
	maxFileShown    = 1 << 20
	readFor         = 30 * time.Second
)

// workspaceView is what the workspace page shows.
type workspaceView struct {
	Reviewer string
	Tenant   string
	User     bool
	CSRF     string
	Session  uuid.UUID
	// Path is the session's page.
	Path string
	// Seq is the snapshot's sequence; 0 with Error set when there is none.
	Seq     uint64
	Entries []fileRow
	// More is how many entries are not shown; Git how many of them are
	// the repository's .git, which the list leaves out.
	More  int
	Git   int
	Error string
	// The diff, or why there is none.
	Changes   *event.Changes
	Patch     string
	Truncated bool
	DiffError string
}

// fileRow is an entry of the snapshot as the page lists it.
type fileRow struct {
	workspaceapi.Entry
	// Href is a regular file's page, "" for others.
	Href string
	Kind string
}

// fileView is what the page of one file shows.
type fileView struct {
	Reviewer string
	Tenant   string
	User     bool
	CSRF     string
	Session  uuid.UUID
	Path     string
	File     string
	Seq      uint64
	Size     int64
	Text     string
	Binary   bool
	// Shown is how many bytes Text holds, less than Size when cut.
	Shown int64
	Error string
}

// workspacePath is a session's workspace page.
func workspacePath(tenant string, session uuid.UUID) string {
	return sessionPath(tenant, session) + "/workspace"
}

// snapshotError is what a page says for err, a refusal of the snapshot
// reader (no snapshot yet, no such file, nothing to compare with), or ""
// for any other failure, which it logs.
func (w *web) snapshotError(err error) string {
	if ae := (*workspaceapi.Error)(nil); errors.As(err, &ae) {
		return ae.Message
	}
	w.s.log.Error("read a workspace snapshot", "err", err)
	return ""
}

func (w *web) workspacePage(rw http.ResponseWriter, r *http.Request, rv reviewer) {
	tenant, session, _, _, err := w.session(r.Context(), r, rv)
	if err != nil {
		w.notFound(rw, err)
		return
	}
	v := workspaceView{Reviewer: rv.name, Tenant: rv.tenant, User: rv.user, CSRF: w.csrf(rv), Session: session, Path: sessionPath(tenant, session)}
	if w.s.snapshots == nil {
		v.Error = "This deployment keeps no workspace snapshots (corral setup creates their store)."
		w.render(rw, http.StatusOK, "workspace.html", v)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readFor)
	defer cancel()
	list, err := w.s.snapshots.List(ctx, tenant, &workspaceapi.ListRequest{Session: session, Recursive: true})
	if err != nil {
		if v.Error = w.snapshotError(err); v.Error == "" {
			http.Error(rw, "The workspace cannot be read now; try again.", http.StatusServiceUnavailable)
			return
		}
		w.render(rw, http.StatusOK, "workspace.html", v)
		return
	}
	v.Seq = list.Seq
	for _, e := range list.Entries {
		switch {
		case snapshot.InGit(e.Path):
			v.Git++
			continue
		case len(v.Entries) == maxEntriesShown:
			v.More++
			continue
		}
		row := fileRow{Entry: e, Kind: "file"}
		switch {
		case e.Mode.IsDir():
			row.Kind = "directory"
		case e.Mode&fs.ModeSymlink != 0:
			row.Kind = "symlink"
		default:
			row.Href = workspacePath(tenant, session) + "/file?" + url.Values{"path": {e.Path}}.Encode()
		}
		v.Entries = append(v.Entries, row)
	}
	diff, err := w.s.snapshots.Diff(ctx, tenant, &workspaceapi.DiffRequest{Session: session}, maxPatchShown)
	switch {
	case err != nil:
		if v.DiffError = w.snapshotError(err); v.DiffError == "" {
			v.DiffError = "What the workspace changed cannot be read now; reload the page to try again."
		}
	case diff.Seq != list.Seq:
		// A snapshot taken between the two reads: the list is the older.
		v.DiffError = "A new snapshot was taken while this page was read: reload it."
	default:
		v.Changes, v.Patch, v.Truncated = diff.Changes, diff.Patch, diff.Truncated
	}
	w.render(rw, http.StatusOK, "workspace.html", v)
}

func (w *web) filePage(rw http.ResponseWriter, r *http.Request, rv reviewer) {
	tenant, session, _, _, err := w.session(r.Context(), r, rv)
	if err != nil {
		w.notFound(rw, err)
		return
	}
	v := fileView{
		Reviewer: rv.name, Tenant: rv.tenant, User: rv.user, CSRF: w.csrf(rv), Session: session,
		Path: workspacePath(tenant, session), File: r.URL.Query().Get("path"),
	}
	if w.s.snapshots == nil {
		v.Error = "This deployment keeps no workspace snapshots (corral setup creates their store)."
		w.render(rw, http.StatusOK, "file.html", v)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readFor)
	defer cancel()
	got, err := w.s.snapshots.Read(ctx, tenant, &workspaceapi.ReadRequest{Session: session, Path: v.File, Length: maxFileShown})
	if err != nil {
		if v.Error = w.snapshotError(err); v.Error == "" {
			http.Error(rw, "The file cannot be read now; try again.", http.StatusServiceUnavailable)
			return
		}
		w.render(rw, http.StatusOK, "file.html", v)
		return
	}
	v.File, v.Seq, v.Size = got.Entry.Path, got.Seq, got.Entry.Size
	data := got.Data
	if int64(len(data)) < v.Size {
		// Cut at a character's start, not inside one.
		for i := 0; i < utf8.UTFMax && len(data) > 0 && !utf8.Valid(data); i++ {
			data = data[:len(data)-1]
		}
	}
	if bytes.IndexByte(data, 0) >= 0 || !utf8.Valid(data) {
		v.Binary = true
	} else {
		v.Text, v.Shown = string(data), int64(len(data))
	}
	w.render(rw, http.StatusOK, "file.html", v)
}
