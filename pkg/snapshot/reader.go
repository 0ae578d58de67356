package snapshot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/google/uuid"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/sessionlog"
	"corral.dev/pkg/workspaceapi"
)

// Reader reads sessions' last snapshots from the store alone: it needs no
// workspace on disk and no sandbox. It is safe for concurrent use.
type Reader struct {
	store  jetstream.ObjectStore
	stream jetstream.Stream // the store's: a blob is read from a chunk on
	logs   *sessionlog.Log
	// manifests caches decoded manifests by [bus.SessionKey]: a file read
	// in pieces, or a workspace read file by file, decodes its manifest
	// once, however large.
	manifests *lru.Cache[string, readManifest]
	// counted caches the lines changes insert and delete, for the diffs
	// read here (see [Changes]).
	counted *lru.Cache[string, event.ChangedFile]
}

// readManifest is a manifest as stored under an object (its NUID, which a
// new manifest of the session changes), indexed by path.
type readManifest struct {
	nuid  string
	m     Manifest
	index map[string]int
}

// NewReader returns a reader of the snapshots in js's object store
// [bus.BucketWorkspaces], which must exist; logs, whose events it reads,
// tells a session with no snapshot yet from one that does not exist. ctx
// bounds the opening of the store alone.
func NewReader(ctx context.Context, js jetstream.JetStream, logs *sessionlog.Log) (*Reader, error) {
	store, stream, err := OpenStore(ctx, js)
	if err != nil {
		return nil, err
	}
	// A few: a manifest may list tens of thousands of files, and what the
	// cache is for is reading one workspace, or one file in pieces.
	manifests, err := lru.New[string, readManifest](16)
	if err != nil {
		return nil, err
	}
	counted, err := lru.New[string, event.ChangedFile](1 << 12)
	if err != nil {
		return nil, err
	}
	return &Reader{store: store, stream: stream, logs: logs, manifests: manifests, counted: counted}, nil
}

// manifest returns the last snapshot of session of tenant. A session
// without one is a [*workspaceapi.Error] of [workspaceapi.CodeNotFound]:
// no such session, or no snapshot yet.
func (r *Reader) manifest(ctx context.Context, tenant string, session uuid.UUID) (readManifest, error) {
	name := ManifestName(tenant, session)
	info, err := r.store.GetInfo(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		_, found, lerr := r.logs.Last(ctx, tenant, session, event.TypeSessionRequested)
		switch {
		case lerr != nil:
			return readManifest{}, fmt.Errorf("look up session %s: %w", session, lerr)
		case !found:
			return readManifest{}, workspaceapi.Errorf(workspaceapi.CodeNotFound, "no session %s in tenant %s", session, tenant)
		}
		return readManifest{}, noSnapshot(session)
	}
	if err != nil {
		return readManifest{}, fmt.Errorf("look up the snapshot of %s: %w", session, err)
	}
	key := bus.SessionKey(tenant, session)
	if c, ok := r.manifests.Get(key); ok && c.nuid == info.NUID {
		return c, nil
	}
	data, err := r.store.GetBytes(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return readManifest{}, noSnapshot(session) // dropped meanwhile
	}
	if err != nil {
		return readManifest{}, fmt.Errorf("read the snapshot of %s: %w", session, err)
	}
	m, err := DecodeManifest(data)
	if err != nil {
		return readManifest{}, fmt.Errorf("read the snapshot of %s: %w", session, err)
	}
	c := readManifest{nuid: info.NUID, m: m, index: make(map[string]int, len(m.Files))}
	for i, f := range m.Files {
		c.index[f.Path] = i
	}
	r.manifests.Add(key, c)
	return c, nil
}

// emptyHash is the SHA-256 of no bytes: an empty file's, whose size a
// manifest leaves out (as zero) and no one need ask the store for.
const emptyHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// entry returns f as the API shows it, asking the store for the size of
// a file a manifest of an older version names without one.
func (r *Reader) entry(ctx context.Context, f File) (workspaceapi.Entry, error) {
	e := workspaceapi.Entry{Path: f.Path, Mode: f.Mode, Size: f.Size, SHA256: f.Hash, Link: f.Link}
	if f.Hash != "" && f.Size == 0 && f.Hash != emptyHash {
		info, err := r.store.GetInfo(ctx, "b."+f.Hash)
		if err != nil {
			return e, fmt.Errorf("%s: %w", f.Path, err)
		}
		e.Size = int64(info.Size)
	}
	return e, nil
}

// lookup returns the workspace path p, as [workspaceapi.Clean] returns it,
// and the last snapshot of session of tenant.
func (r *Reader) lookup(ctx context.Context, tenant string, session uuid.UUID, p string) (string, readManifest, error) {
	rel, err := workspaceapi.Clean(p)
	if err != nil {
		return "", readManifest{}, workspaceapi.Errorf(workspaceapi.CodeBadRequest, "%v", err)
	}
	c, err := r.manifest(ctx, tenant, session)
	return rel, c, err
}

// List answers a [workspaceapi.ListRequest] for tenant (req.Tenant is
// not looked at: the caller checks it). A request the API refuses (a bad
// path; no such session, snapshot or path) is a [*workspaceapi.Error]; any
// other error is the store's or the log's.
func (r *Reader) List(ctx context.Context, tenant string, req *workspaceapi.ListRequest) (*workspaceapi.ListReply, error) {
	rel, c, err := r.lookup(ctx, tenant, req.Session, req.Path)
	if err != nil {
		return nil, err
	}
	out := &workspaceapi.ListReply{Seq: c.m.Seq, Entries: []workspaceapi.Entry{}}
	prefix := ""
	if rel != "." {
		i, ok := c.index[rel]
		if !ok {
			return nil, notInSnapshot(rel, req.Session, c.m.Seq)
		}
		if f := c.m.Files[i]; !f.Mode.IsDir() {
			e, err := r.entry(ctx, f)
			if err != nil {
				return nil, err
			}
			out.Entries = append(out.Entries, e)
			return out, nil
		}
		prefix = rel + "/"
	}
	for _, f := range c.m.Files {
		under, ok := strings.CutPrefix(f.Path, prefix)
		if !ok || (!req.Recursive && strings.Contains(under, "/")) {
			continue
		}
		e, err := r.entry(ctx, f)
		if err != nil {
			return nil, err
		}
		out.Entries = append(out.Entries, e)
	}
	return out, nil
}

// noSnapshot is the error of a request for the snapshot of a session
// that has none.
func noSnapshot(session uuid.UUID) error {
	return workspaceapi.Errorf(workspaceapi.CodeNotFound, "no snapshot of session %s yet: its workspace is saved after a call that changes it", session)
}

func notInSnapshot(rel string, session uuid.UUID, seq uint64) error {
	return workspaceapi.Errorf(workspaceapi.CodeNotFound, "no %s in the last snapshot of session %s (snapshot %d)", path.Join(workspaceapi.Root, rel), session, seq)
}

// maxLinks bounds the symlinks a read follows, as the kernel's
// MAXSYMLINKS does.
const maxLinks = 40

// resolve returns the entry at rel, following symlinks to their targets
// within the workspace.
func (c readManifest) resolve(rel string, session uuid.UUID) (File, error) {
	for range maxLinks {
		i, ok := c.index[rel]
		if !ok {
			return File{}, notInSnapshot(rel, session, c.m.Seq)
		}
		f := c.m.Files[i]
		if f.Link == "" {
			return f, nil
		}
		target := f.Link
		if !path.IsAbs(target) {
			target = path.Join(path.Dir(rel), target)
		}
		next, err := workspaceapi.Clean(target)
		if err != nil || next == "." {
			return File{}, workspaceapi.Errorf(workspaceapi.CodeBadRequest, "%s is a symlink to %s, outside the workspace's files", path.Join(workspaceapi.Root, rel), f.Link)
		}
		rel = next
	}
	return File{}, workspaceapi.Errorf(workspaceapi.CodeBadRequest, "%s: too many levels of symlinks", path.Join(workspaceapi.Root, rel))
}

// Read answers a [workspaceapi.ReadRequest] for tenant, as [Reader.List]
// does: up to req.Length bytes (0 or more than [workspaceapi.MaxRead]:
// MaxRead) of a file from req.Offset, read from the chunks of its blob from
// the one holding the offset, which req.Cursor names when it continues a
// read of the same blob. A snapshot taken since req.Seq (when set) is
// refused with [workspaceapi.CodeChanged].
func (r *Reader) Read(ctx context.Context, tenant string, req *workspaceapi.ReadRequest) (*workspaceapi.ReadReply, error) {
	rel, c, err := r.lookup(ctx, tenant, req.Session, req.Path)
	if err != nil {
		return nil, err
	}
	if req.Seq != 0 && req.Seq != c.m.Seq {
		return nil, workspaceapi.Errorf(workspaceapi.CodeChanged, "session %s's workspace was snapshotted again (snapshot %d, was %d) while it was read", req.Session, c.m.Seq, req.Seq)
	}
	f, err := c.resolve(rel, req.Session)
	if err != nil {
		return nil, err
	}
	if f.Mode.IsDir() {
		return nil, workspaceapi.Errorf(workspaceapi.CodeBadRequest, "%s is a directory", path.Join(workspaceapi.Root, f.Path))
	}
	blob, err := r.store.GetInfo(ctx, "b."+f.Hash)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Path, err)
	}
	size := int64(blob.Size)
	if req.Offset < 0 || req.Offset > size {
		return nil, workspaceapi.Errorf(workspaceapi.CodeBadRequest, "offset %d: %s holds %d bytes", req.Offset, path.Join(workspaceapi.Root, f.Path), size)
	}
	e := workspaceapi.Entry{Path: f.Path, Mode: f.Mode, Size: size, SHA256: f.Hash}
	length := req.Length
	if length <= 0 || length > workspaceapi.MaxRead {
		length = workspaceapi.MaxRead
	}
	want := min(length, size-req.Offset)
	out := &workspaceapi.ReadReply{Seq: c.m.Seq, Entry: e, Data: make([]byte, 0, want)}
	// at is where the chunk at or after seq starts in the file.
	seq, at := uint64(1), int64(0)
	if cur := req.Cursor; cur != nil && cur.Object == blob.NUID && cur.Seq > 0 && cur.At >= 0 && cur.At <= req.Offset {
		seq, at = cur.Seq, cur.At
	}
	chunks := ChunkSubject(blob.NUID)
	for pos := req.Offset; int64(len(out.Data)) < want; {
		msg, err := r.stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(chunks))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, fmt.Errorf("%s: the stored file ends at %d bytes of %d", f.Path, at, size)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Path, err)
		}
		end := at + int64(len(msg.Data))
		if end > pos {
			part := msg.Data[pos-at : min(int64(len(msg.Data)), pos-at+want-int64(len(out.Data)))]
			out.Data = append(out.Data, part...)
			pos += int64(len(part))
		}
		if pos < end {
			// Stopped within this chunk: the next read starts from it.
			out.Next = &workspaceapi.Cursor{Object: blob.NUID, Seq: msg.Sequence, At: at}
			break
		}
		seq, at = msg.Sequence+1, end
		out.Next = &workspaceapi.Cursor{Object: blob.NUID, Seq: seq, At: at}
	}
	return out, nil
}

// Diff answers a [workspaceapi.DiffRequest] for tenant, as [Reader.List]
// does, with a patch of at most limit bytes (0 or less: half of
// [workspaceapi.MaxRead]), cut there and then Truncated. A session that
// started from no repository or uploaded files has nothing to compare
// with: [workspaceapi.CodeNotFound].
func (r *Reader) Diff(ctx context.Context, tenant string, req *workspaceapi.DiffRequest, limit int) (*workspaceapi.DiffReply, error) {
	if limit <= 0 {
		limit = workspaceapi.MaxRead / 2
	}
	c, err := r.manifest(ctx, tenant, req.Session)
	if err != nil {
		return nil, err
	}
	base, err := ReadBase(ctx, r.store, tenant, req.Session)
	if err != nil {
		return nil, err
	}
	if base == nil {
		return nil, workspaceapi.Errorf(workspaceapi.CodeNotFound, "session %s did not start from a repository or uploaded files: there is nothing to compare its workspace with (corral workspace ls and get show what it holds)", req.Session)
	}
	changes := compare(base.Files, c.m.Files)
	read := storeBlobs(r.store)
	stat, err := diffStat(ctx, read, changes, r.counted)
	if err != nil {
		return nil, err
	}
	out := &workspaceapi.DiffReply{Seq: c.m.Seq, Changes: stat}
	if req.Stat {
		return out, nil
	}
	var patch bytes.Buffer
	err = writePatch(ctx, &patch, read, changes, limit)
	switch {
	case errors.Is(err, errPatchTooLarge):
		out.Truncated = true
		patch.Truncate(limit)
	case err != nil:
		return nil, err
	}
	out.Patch = patch.String()
	return out, nil
}
