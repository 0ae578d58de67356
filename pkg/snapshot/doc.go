// Package snapshot reads sessions' workspace snapshots from the object
// store bucket [bus.BucketWorkspaces], which the sandbox-manager writes:
// each file's content once, named by its SHA-256 (b.<hash>); a manifest
// of paths, modes and hashes for each session's last snapshot
// (m.<tenant>.<session>, see [ManifestName]), whose metadata carries the
// snapshot's sequence; and, for a session started from a repository or
// uploaded files, the manifest of the workspace it was prepared with
// (p.<tenant>.<session>, see [BaseName]).
//
// A [Reader] lists, reads and diffs a session's last snapshot from the
// store alone, answering the requests of package workspaceapi: it needs no
// workspace on disk and no sandbox. Its refusals (a session, snapshot or
// path not found, a bad path) are [*workspaceapi.Error] values.
package snapshot
