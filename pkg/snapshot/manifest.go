package snapshot

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
)

// Manifest lists a workspace's files.
type Manifest struct {
	Seq   uint64 `json:"seq"`
	Files []File `json:"files"`
}

// File is an entry of a [Manifest]: a directory, a symlink or a regular
// file.
type File struct {
	Path string      `json:"path"` // relative, slash-separated
	Mode fs.FileMode `json:"mode"`
	Hash string      `json:"hash,omitempty"` // regular files
	// Size is a regular file's length; manifests of older versions lack
	// it, and a [Reader] asks the store for the blob's instead.
	Size int64  `json:"size,omitempty"`
	Link string `json:"link,omitempty"` // symlinks: the target
}

// DecodeManifest reads a manifest and checks that it is one a snapshot
// could have written, before a restore acts on it (and empties the
// workspace first): each path relative, clean and given once, inside a
// directory listed before it; each entry a directory, a symlink with its
// target or a regular file with a SHA-256.
func DecodeManifest(data []byte) (Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return Manifest{}, fmt.Errorf("manifest: %w", err)
	}
	dirs := map[string]bool{".": true}
	seen := make(map[string]bool, len(m.Files))
	for i, f := range m.Files {
		bad := func(why string) error {
			return fmt.Errorf("manifest: file %d (%q): %s", i, f.Path, why)
		}
		switch {
		case f.Path == "" || f.Path == "." || path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == ".." || strings.HasPrefix(f.Path, "../"):
			return Manifest{}, bad("not a clean relative path")
		case seen[f.Path]:
			return Manifest{}, bad("listed twice")
		case !dirs[path.Dir(f.Path)]:
			return Manifest{}, bad("not inside a directory listed before it")
		}
		seen[f.Path] = true
		switch f.Mode.Type() {
		case fs.ModeDir:
			if f.Hash != "" || f.Link != "" {
				return Manifest{}, bad("a directory with a hash or a link")
			}
			dirs[f.Path] = true
		case fs.ModeSymlink:
			if f.Link == "" || f.Hash != "" {
				return Manifest{}, bad("a symlink without its target, or with a hash")
			}
		case 0:
			if b, err := hex.DecodeString(f.Hash); err != nil || len(b) != 32 || hex.EncodeToString(b) != f.Hash || f.Link != "" {
				return Manifest{}, bad("a regular file without a SHA-256, or with a link")
			}
		default:
			return Manifest{}, bad(fmt.Sprintf("mode %v is not a directory's, a symlink's or a regular file's", f.Mode))
		}
	}
	return m, nil
}

// ManifestName is the name in the store of the manifest of the last
// snapshot of session of tenant.
func ManifestName(tenant string, session uuid.UUID) string {
	return "m." + tenant + "." + session.String()
}

// BaseName is the name in the store of the manifest of the workspace
// session of tenant was prepared with: its base, which a diff compares its
// last snapshot with.
func BaseName(tenant string, session uuid.UUID) string {
	return "p." + tenant + "." + session.String()
}

// InGit reports whether the workspace path rel is a repository's .git or
// in it: what a diff leaves out.
func InGit(rel string) bool {
	return rel == ".git" || strings.HasPrefix(rel, ".git/")
}

// OpenStore opens the snapshots' object store, and its stream for what the
// store's API does not offer (reading a blob from one of its chunks,
// purging one).
func OpenStore(ctx context.Context, js jetstream.JetStream) (jetstream.ObjectStore, jetstream.Stream, error) {
	store, err := js.ObjectStore(ctx, bus.BucketWorkspaces)
	if err != nil {
		return nil, nil, fmt.Errorf("open object store %s: %w", bus.BucketWorkspaces, err)
	}
	stream, err := js.Stream(ctx, "OBJ_"+bus.BucketWorkspaces)
	if err != nil {
		return nil, nil, fmt.Errorf("open the stream of object store %s: %w", bus.BucketWorkspaces, err)
	}
	return store, stream, nil
}

// ChunkSubject is where the store keeps the chunks of the object with NUID
// nuid, in the stream [OpenStore] returns.
func ChunkSubject(nuid string) string { return "$O." + bus.BucketWorkspaces + ".C." + nuid }
