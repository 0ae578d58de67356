package sandboxmanager

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"strings"
)

// decodeManifest reads a snapshot's manifest and checks that it is one
// [snapshots.take] could have written, before a restore acts on it (and
// empties the workspace first): each path relative, clean and given once,
// inside a directory listed before it; each entry a directory, a symlink
// with its target or a regular file with a SHA-256.
func decodeManifest(data []byte) (manifest, error) {
	var m manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return manifest{}, fmt.Errorf("manifest: %w", err)
	}
	dirs := map[string]bool{".": true}
	seen := make(map[string]bool, len(m.Files))
	for i, f := range m.Files {
		bad := func(why string) error {
			return fmt.Errorf("manifest: file %d (%q): %s", i, f.Path, why)
		}
		switch {
		case f.Path == "" || f.Path == "." || path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == ".." || strings.HasPrefix(f.Path, "../"):
			return manifest{}, bad("not a clean relative path")
		case seen[f.Path]:
			return manifest{}, bad("listed twice")
		case !dirs[path.Dir(f.Path)]:
			return manifest{}, bad("not inside a directory listed before it")
		}
		seen[f.Path] = true
		switch f.Mode.Type() {
		case fs.ModeDir:
			if f.Hash != "" || f.Link != "" {
				return manifest{}, bad("a directory with a hash or a link")
			}
			dirs[f.Path] = true
		case fs.ModeSymlink:
			if f.Link == "" || f.Hash != "" {
				return manifest{}, bad("a symlink without its target, or with a hash")
			}
		case 0:
			if b, err := hex.DecodeString(f.Hash); err != nil || len(b) != 32 || hex.EncodeToString(b) != f.Hash || f.Link != "" {
				return manifest{}, bad("a regular file without a SHA-256, or with a link")
			}
		default:
			return manifest{}, bad(fmt.Sprintf("mode %v is not a directory's, a symlink's or a regular file's", f.Mode))
		}
	}
	return m, nil
}
