// Package upload moves a tree of files from a client to a session's
// workspace: `corral run --dir` uploads a folder or an archive with
// [Upload], and the sandbox-manager lays it out with [Layout] before the
// session's first turn.
//
// An upload is a [List] of the tree's paths, modes, symlinks' targets and
// each file's SHA-256, and the files' contents, each sent once and named
// by its hash. Both are staged in the UPLOADS stream under the tenant and
// user who uploaded them ([bus.UploadSubject]), in chunks of
// [bus.UploadChunkBytes]; never in the workspaces store, whose blobs every
// tenant's snapshots share, and which a client able to write would poison
// for all of them. A client may write and read only its own tenant's and
// user's subjects there, so one user's upload is never taken for
// another's; and [Layout] checks every path of the list, and every file's
// size and hash, before it writes anything. The list's hash,
// "sha256:<hex>", is the upload's ref, which the session's request names.
//
// A content staged already, and not about to expire, is not sent again:
// uploading the same folder twice sends nothing the second time.
package upload
