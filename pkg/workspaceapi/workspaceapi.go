// Package workspaceapi is the contract of the sandbox-manager's workspace
// API: reading the files of a session's last workspace snapshot without a
// sandbox, while the session runs, after it ended, and after the node that
// ran it died. Clients (corral workspace) import it without importing the
// service, and may not read the snapshots' object store themselves.
package workspaceapi

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/tool"
)

// Operations of the API: the last token of its subjects.
const (
	// OpList lists the entries under a path ([ListRequest]).
	OpList = "ls"
	// OpRead reads a piece of a file ([ReadRequest]).
	OpRead = "cat"
	// OpDiff compares a workspace with what it started from
	// ([DiffRequest]).
	OpDiff = "diff"
)

// MaxRead is the most bytes one [ReadRequest] returns: a reply (its data
// base64-encoded in JSON) stays under the server's max_payload of 8 MB. A
// client reads a larger file in pieces, each at most this long and at
// most what its connection's MaxPayload allows (see [ReadLength]).
const MaxRead = 4 << 20

// Root is where a workspace is seen in its sandbox: the API's paths are
// relative to it.
const Root = tool.Workspace

// Subject is where a client acting as user of tenant asks for op
// ([OpList] or [OpRead]):
//
//	corral.workspace.<tenant>.<user token>.<op>
//
// with the user as a [bus.UserToken]. The service takes the tenant from the
// subject, never from the body: the NATS permissions let a client publish
// only for its own tenant, so a session of another tenant is simply not
// found. Every session of the tenant may be read, as its log may.
func Subject(tenant, user, op string) string {
	return bus.WorkspaceAPI(tenant, bus.UserToken(user), op)
}

// ListRequest asks for the entries under Path in the last snapshot of
// Session: Path itself if it is a file or a symlink, else what the
// directory holds (its direct entries, or with Recursive every entry
// below it). Path is as [Clean] takes it; empty is the whole workspace.
// Tenant may be left empty; one naming another tenant than the subject's
// is refused.
type ListRequest struct {
	Tenant    string    `json:"tenant,omitempty"`
	Session   uuid.UUID `json:"session"`
	Path      string    `json:"path,omitempty"`
	Recursive bool      `json:"recursive,omitempty"`
}

// Entry is a file, directory or symlink of a snapshot.
type Entry struct {
	// Path is relative to [Root], slash-separated.
	Path string      `json:"path"`
	Mode fs.FileMode `json:"mode"`
	// Size is a regular file's length in bytes.
	Size int64 `json:"size,omitempty"`
	// SHA256 is a regular file's content hash (hex), which a client
	// checks what it read against.
	SHA256 string `json:"sha256,omitempty"`
	// Link is a symlink's target.
	Link string `json:"link,omitempty"`
}

// ListReply answers a [ListRequest]: the snapshot's sequence, and its
// entries in the order of the workspace's walk (a directory before what it
// holds).
type ListReply struct {
	Seq     uint64  `json:"seq"`
	Entries []Entry `json:"entries"`
}

// ReadRequest asks for up to Length bytes (0: [MaxRead]; at most
// MaxRead) of the file at Path of Session's last snapshot, from Offset. A
// symlink is followed within the workspace. With Seq set, the snapshot
// must still be that one: a snapshot taken since is refused with
// [CodeChanged], so that a file read in pieces is one snapshot's. Cursor
// is the previous reply's Next, when Offset continues where it ended: it
// lets the service go on without reading the file from its start again;
// any other cursor is ignored or only costs a wrong piece to its sender.
type ReadRequest struct {
	Tenant  string    `json:"tenant,omitempty"`
	Session uuid.UUID `json:"session"`
	Path    string    `json:"path"`
	Offset  int64     `json:"offset,omitempty"`
	Length  int64     `json:"length,omitempty"`
	Seq     uint64    `json:"seq,omitempty"`
	Cursor  *Cursor   `json:"cursor,omitempty"`
}

// Cursor says where in the store the bytes after a reply's Data lie: opaque
// to clients, which hand it back in the next [ReadRequest].
type Cursor struct {
	Object string `json:"object"`
	Seq    uint64 `json:"seq"`
	At     int64  `json:"at"`
}

// ReadReply answers a [ReadRequest]: the file's entry (its Path the file
// read, after symlinks), the snapshot's sequence, and the bytes from the
// request's Offset. The file ends at Entry.Size.
type ReadReply struct {
	Seq   uint64  `json:"seq"`
	Entry Entry   `json:"entry"`
	Data  []byte  `json:"data"`
	Next  *Cursor `json:"next,omitempty"`
}

// DiffRequest asks what the last snapshot of Session changed since the
// workspace was prepared: for a session started from a repository, against
// the ref it started from (its .git left out); from uploaded files,
// against those. With Stat, only the counts, not the patch.
type DiffRequest struct {
	Tenant  string    `json:"tenant,omitempty"`
	Session uuid.UUID `json:"session"`
	Stat    bool      `json:"stat,omitempty"`
}

// DiffReply answers a [DiffRequest]: the snapshot compared, what changed,
// and the patch (git's format, which git apply takes), cut at half of [MaxRead]
// bytes and then Truncated.
type DiffReply struct {
	Seq       uint64         `json:"seq"`
	Changes   *event.Changes `json:"changes"`
	Patch     string         `json:"patch,omitempty"`
	Truncated bool           `json:"truncated,omitempty"`
}

// ReadLength is the Length a client asks for when its connection carries
// at most maxPayload bytes: [MaxRead], or less so that the reply's base64
// and JSON fit.
func ReadLength(maxPayload int64) int64 {
	return max(1, min(MaxRead, (maxPayload-4096)/4*3))
}

// Error codes of the API, in the Nats-Service-Error-Code header: a request
// refused as written, a session or path not found (or no snapshot yet), a
// snapshot changed since the Seq a read names, and the service's own
// failure.
const (
	CodeBadRequest = "400"
	CodeNotFound   = "404"
	CodeChanged    = "409"
	CodeInternal   = "500"
)

// Error is the API's answer to a request it refuses or cannot answer with
// a reply: Code is one of the codes above, Message says why. The service
// sends them as the Nats-Service-Error-Code and Nats-Service-Error
// headers; a reader of snapshots in process (package snapshot) returns
// them as an *Error, which callers tell from a failure with errors.As.
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Message }

// Errorf returns an [*Error] of code, its message formatted as
// [fmt.Sprintf] formats it.
func Errorf(code, format string, args ...any) error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrBadPath is wrapped by [Clean]'s errors.
var ErrBadPath = errors.New("not a path in /workspace")

// Clean returns p relative to [Root], slash-separated and clean: "." for
// the workspace itself. p may be given as "/workspace/x" or "x"; a path
// with a ".." element, or an absolute path outside /workspace, is refused
// with an error wrapping [ErrBadPath].
func Clean(p string) (string, error) {
	// Stricter than the tools: no ".." at all, even one that stays inside.
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return "", fmt.Errorf("%q: %w (no .. element)", p, ErrBadPath)
		}
	}
	rel, err := tool.WorkspacePath(p)
	if err != nil {
		return "", fmt.Errorf("%q: %w (give it as /workspace/... or relative to it)", p, ErrBadPath)
	}
	return rel, nil
}
