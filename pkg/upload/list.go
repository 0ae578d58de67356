package upload

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"unicode/utf8"
)

// List is an uploaded tree: every directory, regular file and symlink in
// it, each directory before what it holds. Its JSON is what is uploaded,
// and what its ref is the hash of.
type List struct {
	Files []Entry `json:"files"`
}

// Entry is one path of a [List].
type Entry struct {
	// Path is relative to the tree's root and slash-separated, with no
	// "." or ".." element.
	Path string `json:"path"`
	// Mode is the entry's type (a directory, a symlink, or none for a
	// regular file) and its permission bits.
	Mode fs.FileMode `json:"mode"`
	// Size and Hash are a regular file's length and SHA-256 (hex).
	Size int64  `json:"size,omitempty"`
	Hash string `json:"hash,omitempty"`
	// Link is a symlink's target, as it was: it is not followed, nor
	// checked.
	Link string `json:"link,omitempty"`
}

// Bounds on what one upload may hold, on the client; the sandbox-manager
// bounds what it lays out by the workspace's quota.
const (
	// MaxEntries bounds the directories, files and symlinks.
	MaxEntries = 200_000
	// MaxBytes bounds the bytes of the files.
	MaxBytes = 50 << 30
	// maxPath bounds a path's bytes and a link's target's, and maxName
	// each element's, as Linux does.
	maxPath = 4096
	maxName = 255
	// maxListBytes bounds a list's JSON: about MaxEntries entries of
	// 200 bytes.
	maxListBytes = 64 << 20
)

// emptyHash is the SHA-256 of nothing: an empty file's, which is never
// uploaded.
var emptyHash = hex.EncodeToString(func() []byte { h := sha256.Sum256(nil); return h[:] }())

// refPrefix starts every ref.
const refPrefix = "sha256:"

// Ref returns the list's JSON, and its ref: "sha256:" and the JSON's
// SHA-256 in hex.
func (l *List) Ref() (ref string, data []byte, err error) {
	data, err = json.Marshal(l)
	if err != nil {
		return "", nil, err
	}
	sum := sha256.Sum256(data)
	return refPrefix + hex.EncodeToString(sum[:]), data, nil
}

// ParseRef returns the hash a ref names, or an error if it is not
// "sha256:" and 64 lower-case hex digits.
func ParseRef(ref string) (string, error) {
	hash, ok := strings.CutPrefix(ref, refPrefix)
	if !ok || !isHash(hash) {
		return "", fmt.Errorf("%q is not an upload's ref (sha256: and 64 hex digits)", ref)
	}
	return hash, nil
}

// isHash reports whether s is a SHA-256 in lower-case hex.
func isHash(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Totals counts the list's entries and its regular files, and sums the
// files' bytes.
func (l *List) Totals() (entries, files int, bytes int64) {
	for _, e := range l.Files {
		if e.Mode.Type() == 0 {
			files++
			bytes += e.Size
		}
	}
	return len(l.Files), files, bytes
}

// Check returns an error naming the first entry of l that may not be laid
// out under a directory as it is: a path that is empty, absolute, not
// clean (a "." or ".." element, a doubled or trailing slash), too long,
// not UTF-8 or holding a NUL; one listed twice; one whose parent is not a
// directory listed before it (which is also what keeps anything from
// being laid out through a symlink, or inside a file); a type other than a
// directory, a regular file or a symlink; a file without a size and hash,
// or a symlink without a target. Modes' bits beyond the permissions
// (setuid, setgid, sticky) are not an error: they are never applied.
func (l *List) Check() error {
	dirs := make(map[string]bool, len(l.Files)) // every path seen: is it a directory?
	for _, e := range l.Files {
		if err := checkPath(e.Path); err != nil {
			return err
		}
		if _, dup := dirs[e.Path]; dup {
			return fmt.Errorf("the file list names %q twice", e.Path)
		}
		if parent := path.Dir(e.Path); parent != "." && !dirs[parent] {
			return fmt.Errorf("the file list names %q in %q, which is not a directory listed before it", e.Path, parent)
		}
		switch e.Mode.Type() {
		case fs.ModeDir:
			if e.Size != 0 || e.Hash != "" || e.Link != "" {
				return fmt.Errorf("the file list gives the directory %q a size, hash or link", e.Path)
			}
		case 0:
			if !isHash(e.Hash) || e.Size < 0 || e.Size > MaxBytes || e.Link != "" {
				return fmt.Errorf("the file list gives the file %q no size and SHA-256, or a link", e.Path)
			}
		case fs.ModeSymlink:
			if e.Link == "" || len(e.Link) > maxPath || strings.IndexByte(e.Link, 0) >= 0 || !utf8.ValidString(e.Link) || e.Size != 0 || e.Hash != "" {
				return fmt.Errorf("the file list gives the symlink %q no valid target, or a size or hash", e.Path)
			}
		default:
			return fmt.Errorf("the file list names %q of type %s: only directories, regular files and symlinks are laid out", e.Path, e.Mode.Type())
		}
		dirs[e.Path] = e.Mode.IsDir()
	}
	return nil
}

// checkPath returns an error unless p is a path that [List.Check]
// accepts.
func checkPath(p string) error {
	switch {
	case p == "" || p == ".":
		return fmt.Errorf("the file list names an empty path")
	case len(p) > maxPath:
		return fmt.Errorf("the file list names a path of %d bytes, over %d", len(p), maxPath)
	case !utf8.ValidString(p) || strings.IndexByte(p, 0) >= 0:
		return fmt.Errorf("the file list names %q, which is not UTF-8 or holds a NUL", p)
	case path.IsAbs(p) || path.Clean(p) != p || p == ".." || strings.HasPrefix(p, "../"):
		return fmt.Errorf("the file list names %q, which is not a clean relative path inside the workspace", p)
	}
	for name := range strings.SplitSeq(p, "/") {
		if len(name) > maxName {
			return fmt.Errorf("the file list names %q, with an element of %d bytes, over %d", p, len(name), maxName)
		}
	}
	return nil
}
