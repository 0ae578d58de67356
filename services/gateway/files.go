package gateway

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/upload"
	"corral.dev/services/gateway/internal/wire"
)

// The Files API keeps a file as an upload of its caller's tenant and user
// (package upload: its content staged in chunks under
// uploads.<tenant>.<user>., which only that user's sessions lay out), and
// its metadata as a record of the gateway's bucket under that user's
// token, <tenant>.file.<user>.<id>. A file is its user's: every endpoint
// looks for it among the caller's user's alone, and another tenant's, or
// another user's, is not found. A session's file resources become a file
// list of those contents, staged as the same user, which the session's
// first request names (event.Request.Files): the sandbox-manager lays it
// out in /workspace before the model's first turn, as it lays out
// corral run --dir.

// kindFile is the second token of a file's record's key.
const kindFile = "file"

// maxFileBytes bounds a file's bytes: the API's own bound on a file, and
// well within what the uploads' stream holds (bus.UploadMaxBytes).
const maxFileBytes = 500 << 20

// maxFilename bounds a file's name, in bytes, as Linux bounds a name.
const maxFilename = 255

// maxIDs bounds the IDs of a list's ?ids=, as the API does.
const maxIDs = 100

// fileRecord is a file as the gateway keeps it.
type fileRecord struct {
	ID       string `json:"id"`
	Filename string `json:"filename"`
	MimeType string `json:"mime_type"`
	Size     int64  `json:"size"`
	// Hash is the content's SHA-256 in hex: its name among User's
	// uploads.
	Hash      string    `json:"hash"`
	User      string    `json:"user"`
	CreatedAt time.Time `json:"created_at"`
	// ExpiresAt is when the content stops being staged, or sooner if the
	// upload asked: the file is gone then.
	ExpiresAt time.Time `json:"expires_at"`
}

// fileKey is the key of the record of file id of user of tenant; the ID
// "*" makes a filter of every file of the user's.
func fileKey(tenant, user, id string) string {
	return recordKey(tenant, kindFile, bus.UserToken(user)+"."+id)
}

// newFileID returns a new file's ID, in the API's style.
func newFileID() string {
	return "file_" + strings.ReplaceAll(uuid.Must(uuid.NewV7()).String(), "-", "")
}

// isFileID reports whether id is one [newFileID] makes: anything else
// (a dot, a wildcard) would name other keys than a file's.
func isFileID(id string) bool {
	hexID, ok := strings.CutPrefix(id, "file_")
	if !ok || len(hexID) != 32 {
		return false
	}
	_, err := hex.DecodeString(hexID)
	return err == nil && strings.ToLower(hexID) == hexID
}

func fileJSON(f *fileRecord) wire.File {
	return wire.File{Type: "file", ID: f.ID, Filename: f.Filename, MimeType: f.MimeType, SizeBytes: f.Size,
		CreatedAt: f.CreatedAt, ExpiresAt: f.ExpiresAt, Downloadable: true}
}

// tooLarge is the API's answer to a file over maxFileBytes.
func tooLarge() error {
	return &apiError{http.StatusRequestEntityTooLarge, wire.TooLarge,
		fmt.Sprintf("a file is at most %d bytes (500 MiB); for a larger tree, corral run --dir uploads a folder or an archive", maxFileBytes)}
}

// uploadFile answers POST /v1/files: a multipart form whose part "file"
// is the file, and maybe "expires_in_seconds". The content is spooled to
// a temporary file while it is hashed (its chunks are named by its hash),
// then staged as the caller's user's upload.
func (s *Service) uploadFile(ctx context.Context, c *caller, w http.ResponseWriter, r *http.Request) error {
	r.Body = http.MaxBytesReader(w, r.Body, maxFileBytes+1<<20)
	mr, err := r.MultipartReader()
	if err != nil {
		return badRequest("the request's body: want multipart/form-data, the file as its part \"file\" (%v)", err)
	}
	var f *spooled
	defer func() { f.remove() }()
	var expiresIn time.Duration
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return formError(err)
		}
		switch name := part.FormName(); name {
		case "file":
			if f != nil {
				return badRequest("the form holds two parts named \"file\": upload one file a request")
			}
			if f, err = spool(part); err != nil {
				return err
			}
		case "expires_in_seconds":
			if expiresIn, err = readExpiry(part); err != nil {
				return err
			}
		default:
			return unsupported("the form field %q", name)
		}
	}
	if f == nil {
		return badRequest("the form holds no part named \"file\": send the file as it")
	}
	now := time.Now().UTC()
	stored, err := upload.StageContent(ctx, c.js, c.tenant, c.user, f.hash, f.size, f.file)
	if err != nil {
		return fmt.Errorf("stage %s: %w", f.name, err)
	}
	rec := fileRecord{ID: newFileID(), Filename: f.name, MimeType: f.mimeType, Size: f.size, Hash: f.hash, User: c.user,
		CreatedAt: now, ExpiresAt: stored.Add(bus.UploadMaxAge).UTC().Truncate(time.Second)}
	if expiresIn > 0 && now.Add(expiresIn).Before(rec.ExpiresAt) {
		rec.ExpiresAt = now.Add(expiresIn)
	}
	if err := writeRecord(ctx, c.js, fileKey(c.tenant, c.user, rec.ID), rec, 0); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, fileJSON(&rec))
	return nil
}

// formError is the answer to a form that could not be read.
func formError(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return tooLarge()
	}
	return badRequest("the request's form: %v", err)
}

// readExpiry reads the form's expires_in_seconds: the API's bounds, an
// hour to ninety days, of which Corral keeps a file [bus.UploadMaxAge] at
// most.
func readExpiry(part io.Reader) (time.Duration, error) {
	b, err := io.ReadAll(io.LimitReader(part, 32))
	if err != nil {
		return 0, formError(err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	switch most := int64(bus.UploadMaxAge / time.Second); {
	case err != nil || n < 3600 || n > 7776000:
		return 0, badRequest("expires_in_seconds=%q: want 3600 to 7776000", b)
	case n > most:
		return 0, unsupported("expires_in_seconds=%d, over %d (Corral keeps an uploaded file %d days)", n, most, most/86400)
	}
	return time.Duration(n) * time.Second, nil
}

// spooled is a file's content as uploaded, in a temporary file, with its
// name, type, size and SHA-256.
type spooled struct {
	file           *os.File
	name, mimeType string
	size           int64
	hash           string
}

// spool copies part to a temporary file, hashing it, and returns it
// rewound; one over maxFileBytes is refused.
func spool(part *multipart.Part) (*spooled, error) {
	name := part.FileName()
	if len(name) > maxFilename || !utf8.ValidString(name) || strings.ContainsRune(name, 0) {
		return nil, badRequest("the file's name: want UTF-8 of at most %d bytes", maxFilename)
	}
	tmp, err := os.CreateTemp("", "corral-file-*")
	if err != nil {
		return nil, err
	}
	f := &spooled{file: tmp}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(part, maxFileBytes+1))
	if err == nil && n > maxFileBytes {
		err = tooLarge()
	}
	if err == nil {
		_, err = tmp.Seek(0, io.SeekStart)
	}
	if err != nil {
		f.remove()
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, tooLarge()
		}
		return nil, err
	}
	f.size, f.hash = n, hex.EncodeToString(h.Sum(nil))
	f.mimeType, f.name = fileType(part.Header.Get("Content-Type"), name)
	return f, nil
}

// fileType returns a file's MIME type, the part's own unless it says
// nothing more than octet-stream (the SDKs' default), then its name's
// extension's; and its name, "unnamed" and the type's extension if it
// has none, as the API names it.
func fileType(sent, name string) (string, string) {
	typ := "application/octet-stream"
	if mt, _, err := mime.ParseMediaType(sent); err == nil && mt != typ {
		typ = sent
	} else if byExt := mime.TypeByExtension(path.Ext(name)); byExt != "" {
		typ = byExt
	}
	if name == "" {
		name = "unnamed"
		if exts, _ := mime.ExtensionsByType(typ); len(exts) > 0 {
			name += exts[0]
		}
	}
	return typ, name
}

func (f *spooled) remove() {
	if f == nil {
		return
	}
	f.file.Close()
	os.Remove(f.file.Name())
}

// file returns the record of file id of c's user, and its sequence: a
// file that is not c's user's, or has expired, is not found.
func (s *Service) file(ctx context.Context, c *caller, id string) (*fileRecord, uint64, error) {
	if !isFileID(id) {
		return nil, 0, notFound("no file %q", id)
	}
	var f fileRecord
	seq, err := readRecord(ctx, c.js, fileKey(c.tenant, c.user, id), &f)
	switch {
	case errors.Is(err, errNoRecord) || err == nil && (f.ID != id || f.User != c.user):
		return nil, 0, notFound("no file %s", id)
	case err != nil:
		return nil, 0, err
	case !time.Now().Before(f.ExpiresAt):
		return nil, 0, notFound("file %s expired at %s (Corral keeps an uploaded file %d days)", id, f.ExpiresAt.Format(time.RFC3339), int(bus.UploadMaxAge.Hours()/24))
	}
	return &f, seq, nil
}

// getFile answers GET /v1/files/{id}.
func (s *Service) getFile(ctx context.Context, c *caller, w http.ResponseWriter, r *http.Request) error {
	f, _, err := s.file(ctx, c, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, fileJSON(f))
	return nil
}

// downloadFile answers GET /v1/files/{id}/content: the content, read from
// the chunks c's user staged, and checked against its size and hash as it
// is sent. Its headers are sent with its first bytes, so that a content
// no longer staged is still answered with the API's error; one found
// corrupt once sent cuts the connection, the client seeing fewer bytes
// than Content-Length says.
func (s *Service) downloadFile(ctx context.Context, c *caller, w http.ResponseWriter, r *http.Request) error {
	f, _, err := s.file(ctx, c, r.PathValue("id"))
	if err != nil {
		return err
	}
	out := &lazyWriter{w: w, header: func(h http.Header) {
		h.Set("Content-Type", f.MimeType)
		h.Set("Content-Length", strconv.FormatInt(f.Size, 10))
		h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": f.Filename}))
	}}
	err = upload.ReadContent(ctx, upload.DirectChunks(c.js), c.tenant, c.user, f.Hash, f.Size, f.ID, out)
	switch {
	case err == nil:
		out.start()
		return nil
	case out.started:
		panic(http.ErrAbortHandler)
	case errors.Is(err, upload.ErrRefused):
		return notFound("%v", err)
	}
	return err
}

// lazyWriter writes its header with its first bytes.
type lazyWriter struct {
	w       http.ResponseWriter
	header  func(http.Header)
	started bool
}

func (l *lazyWriter) start() {
	if !l.started {
		l.started = true
		l.header(l.w.Header())
		l.w.WriteHeader(http.StatusOK)
	}
}

func (l *lazyWriter) Write(p []byte) (int, error) {
	l.start()
	return l.w.Write(p)
}

// deleteFile answers DELETE /v1/files/{id}: the file is gone from the
// API, and no new session may name it; its content stays staged until it
// expires (no client may remove what the uploads' stream holds), and a
// session created with it already still starts with it.
func (s *Service) deleteFile(ctx context.Context, c *caller, w http.ResponseWriter, r *http.Request) error {
	f, seq, err := s.file(ctx, c, r.PathValue("id"))
	if err != nil {
		return err
	}
	if err := deleteRecord(ctx, c.js, fileKey(c.tenant, c.user, f.ID), seq); err != nil {
		if bus.Conflict(err) {
			return notFound("no file %s", f.ID)
		}
		return err
	}
	writeJSON(w, http.StatusOK, wire.DeletedFile{ID: f.ID, Type: "file_deleted"})
	return nil
}

// listFiles answers GET /v1/files: c's user's files, newest first, a
// page at a time (?page= the cursor a page's next_page gave), or those
// ?ids= names, in one page.
func (s *Service) listFiles(ctx context.Context, c *caller, w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	if q.Get("scope_id") != "" {
		return unsupported("filtering files by scope_id (a file a session made: a Corral session's files are in its workspace)")
	}
	for _, p := range []string{"before_id", "after_id"} {
		if q.Get(p) != "" {
			return unsupported("%s (pages are read with ?page=, the cursor of a page's next_page)", p)
		}
	}
	ids := values(q, "ids")
	if len(ids) > 0 && (q.Get("page") != "" || q.Get("limit") != "") {
		return badRequest("ids goes with neither page nor limit")
	}
	slices.Sort(ids)
	if ids = slices.Compact(ids); len(ids) > maxIDs {
		return badRequest("ids names %d files, over %d", len(ids), maxIDs)
	}
	recs, err := listRecords(ctx, c.js, fileKey(c.tenant, c.user, "*"))
	if err != nil {
		return err
	}
	now := time.Now()
	var all []wire.File
	for key, data := range recs {
		var f fileRecord
		// Only a record that is its key's: any other was not the
		// gateway's.
		if json.Unmarshal(data, &f) != nil || !isFileID(f.ID) || key != fileKey(c.tenant, f.User, f.ID) || f.User != c.user ||
			!now.Before(f.ExpiresAt) || (len(ids) > 0 && !slices.Contains(ids, f.ID)) {
			continue
		}
		all = append(all, fileJSON(&f))
	}
	slices.SortFunc(all, func(a, b wire.File) int {
		return -cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	if len(ids) > 0 {
		writeJSON(w, http.StatusOK, wire.Page[wire.File]{Data: all})
		return nil
	}
	page, err := pageOf(q, all, func(f wire.File) string { return "page_" + f.ID }, func(f wire.File) wire.File { return f })
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}

// workspaceFrom sets what the new session rec's workspace starts from,
// from its resources: one github_repository (see [repository]), or files,
// each laid out at its mount_path under /workspace (by default
// /workspace/uploads/<file_id>, where the API's is
// /mnt/session/uploads/<file_id>). Not both: a workspace starts as a
// checkout or as uploaded files, as corral run takes --repo or --dir. The
// files make a file list staged as c's user, the session's, which the
// session's first request names; the session shows each file resource
// with the mount path it has.
func (s *Service) workspaceFrom(ctx context.Context, c *caller, rec *sessionRecord, resources []json.RawMessage) error {
	var files, others []int
	for i, raw := range resources {
		var res struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(raw, &res); err != nil {
			return badRequest("resources[%d]: %v", i, err)
		}
		if res.Type == "file" {
			files = append(files, i)
		} else {
			others = append(others, i)
		}
	}
	if len(files) == 0 {
		repo, err := repository(resources)
		rec.Repo = repo
		return err
	}
	if len(others) > 0 {
		var res struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(resources[others[0]], &res)
		return unsupported("resources[%d]: a resource of type %q with files (a session's workspace starts as uploaded files or as one repository, not both)", others[0], res.Type)
	}
	l, shown, err := s.fileList(ctx, c, resources)
	if err != nil {
		return err
	}
	if rec.Files, err = upload.StageList(ctx, c.js, c.tenant, c.user, l); err != nil {
		return fmt.Errorf("stage the session's file list: %w", err)
	}
	rec.Resources = shown
	return nil
}

// workspaceRoot is where a session's workspace is, as its tools see it.
const workspaceRoot = "/workspace"

// fileResource is a session's resource of type file.
type fileResource struct {
	Type      string  `json:"type"`
	FileID    string  `json:"file_id"`
	MountPath *string `json:"mount_path,omitempty"`
}

// fileList returns the file list that lays out the files resources name
// (each of type file) at their mount paths, and the resources as the
// session shows them, each with its mount path.
func (s *Service) fileList(ctx context.Context, c *caller, resources []json.RawMessage) (*upload.List, []json.RawMessage, error) {
	l := &upload.List{}
	shown := make([]json.RawMessage, len(resources))
	at := make(map[string]int) // a file's path in the workspace -> its resource
	dirs := make(map[string]bool)
	for i, raw := range resources {
		var res fileResource
		if err := strict(raw, &res); err != nil {
			return nil, nil, prefixed(err, fmt.Sprintf("resources[%d]: ", i))
		}
		rel, err := mountPath(res.MountPath, res.FileID)
		if err != nil {
			return nil, nil, prefixed(err, fmt.Sprintf("resources[%d]: ", i))
		}
		if j, dup := at[rel]; dup {
			return nil, nil, badRequest("resources[%d]: mount_path %s is resources[%d]'s too", i, workspaceRoot+"/"+rel, j)
		}
		f, _, err := s.file(ctx, c, res.FileID)
		if err != nil {
			return nil, nil, prefixed(err, fmt.Sprintf("resources[%d]: ", i))
		}
		at[rel] = i
		l.Files = append(l.Files, upload.Entry{Path: rel, Mode: 0o644, Size: f.Size, Hash: f.Hash})
		for d := path.Dir(rel); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
		mp := workspaceRoot + "/" + rel
		res.MountPath = &mp
		shown[i], _ = json.Marshal(res)
	}
	for d := range dirs {
		if i, clash := at[d]; clash {
			return nil, nil, badRequest("resources[%d]: mount_path %s is a directory of another resource's mount path", i, workspaceRoot+"/"+d)
		}
		l.Files = append(l.Files, upload.Entry{Path: d, Mode: fs.ModeDir | 0o755})
	}
	// A directory sorts before what it holds: its path is their prefix.
	slices.SortFunc(l.Files, func(a, b upload.Entry) int { return strings.Compare(a.Path, b.Path) })
	if err := l.Check(); err != nil {
		return nil, nil, badRequest("resources: %v", err)
	}
	return l, shown, nil
}

// mountPath returns a file resource's mount path relative to the
// workspace: mount_path, an absolute path under /workspace, or by
// default uploads/<file_id>.
func mountPath(p *string, fileID string) (string, error) {
	if p == nil {
		if !isFileID(fileID) {
			return "", notFound("no file %q", fileID)
		}
		return "uploads/" + fileID, nil
	}
	mp := *p
	rel, under := strings.CutPrefix(mp, workspaceRoot+"/")
	switch {
	case !path.IsAbs(mp):
		return "", badRequest("mount_path %q: want an absolute path under %s, such as %s/data.csv", mp, workspaceRoot, workspaceRoot)
	case path.Clean(mp) != mp:
		return "", badRequest("mount_path %q: want a clean path (no \"..\", \".\", doubled or trailing slash)", mp)
	case !under || rel == "":
		return "", unsupported("mount_path %q, outside %s (a session's files are laid out in its workspace, %s)", mp, workspaceRoot, workspaceRoot)
	}
	return rel, nil
}
