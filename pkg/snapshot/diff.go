package snapshot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"

	"github.com/aymanbagabas/go-udiff"
	"github.com/google/uuid"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/event"
)

// What a workspace started from a repository changed: its last snapshot
// against its base (see [BaseName]), file by file, the repository's .git
// left out. Both are manifests in the store, so the comparison needs no
// workspace on disk and no sandbox, and reads only the contents of the
// files that differ.

// maxDiffBlob is the largest file whose lines are compared; a larger one
// counts as binary.
const maxDiffBlob = 8 << 20

// change is one file of a workspace that differs from its base: Old is
// nil for a file added, New for one deleted.
type change struct {
	Path     string
	Old, New *File
}

// status is how c's file changed: "added", "modified" or "deleted".
func (c change) status() string {
	switch {
	case c.Old == nil:
		return "added"
	case c.New == nil:
		return "deleted"
	}
	return "modified"
}

// compare returns the files (regular files and symlinks) that differ
// between the manifests base and now, by path.
func compare(base, now []File) []change {
	index := func(files []File) map[string]*File {
		m := make(map[string]*File, len(files))
		for i := range files {
			f := &files[i]
			if f.Mode.IsDir() || InGit(f.Path) {
				continue
			}
			m[f.Path] = f
		}
		return m
	}
	was, is := index(base), index(now)
	var out []change
	for p, n := range is {
		o := was[p]
		if o == nil || o.Hash != n.Hash || o.Link != n.Link || gitMode(o.Mode) != gitMode(n.Mode) {
			out = append(out, change{Path: p, Old: o, New: n})
		}
	}
	for p, o := range was {
		if is[p] == nil {
			out = append(out, change{Path: p, Old: o})
		}
	}
	slices.SortFunc(out, func(a, b change) int { return strings.Compare(a.Path, b.Path) })
	return out
}

// labels are the names a patch gives c's file before and after, as git
// writes them: a/<path> and b/<path>, quoted where the path needs it, or
// /dev/null for a file added or deleted.
func (c change) labels() (from, to string) {
	from, to = quotePath("a/"+c.Path), quotePath("b/"+c.Path)
	if c.Old == nil {
		from = "/dev/null"
	}
	if c.New == nil {
		to = "/dev/null"
	}
	return from, to
}

// quotePath quotes p as git quotes a path in a patch when it holds a
// control character, a double quote, a backslash or a byte past ASCII:
// in double quotes, those escaped as in C (octal for most). A name with a
// newline so stays one line of the patch, and cannot forge another file's
// header.
func quotePath(p string) string {
	plain := true
	for i := 0; i < len(p); i++ {
		if c := p[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			plain = false
			break
		}
	}
	if plain {
		return p
	}
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(p); i++ {
		switch c := p[i]; c {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case '\a':
			b.WriteString(`\a`)
		case '\b':
			b.WriteString(`\b`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\v':
			b.WriteString(`\v`)
		case '\f':
			b.WriteString(`\f`)
		case '\r':
			b.WriteString(`\r`)
		default:
			if c < 0x20 || c >= 0x7f {
				fmt.Fprintf(&b, "\\%03o", c)
			} else {
				b.WriteByte(c)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

// gitMode is the mode git records for a file of mode m.
func gitMode(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "120000"
	case m&0o100 != 0:
		return "100755"
	}
	return "100644"
}

// blobReader reads the content of a file of a manifest, given by hash; ok
// is false for one over [maxDiffBlob].
type blobReader func(ctx context.Context, hash string) (data []byte, ok bool, err error)

// storeBlobs returns a blobReader of store.
func storeBlobs(store jetstream.ObjectStore) blobReader {
	return func(ctx context.Context, hash string) ([]byte, bool, error) {
		obj, err := store.Get(ctx, "b."+hash)
		if err != nil {
			return nil, false, err
		}
		defer obj.Close()
		data, err := io.ReadAll(io.LimitReader(obj, maxDiffBlob+1))
		if err != nil {
			return nil, false, err
		}
		if len(data) > maxDiffBlob {
			return nil, false, nil
		}
		return data, true, nil
	}
}

// content returns what the file f holds as text, and false if it is
// binary (or too large to compare); a symlink holds its target.
func content(ctx context.Context, read blobReader, f *File) (string, bool, error) {
	switch {
	case f == nil:
		return "", true, nil
	case f.Mode&fs.ModeSymlink != 0:
		return f.Link, true, nil
	case f.Hash == "":
		return "", true, nil
	}
	data, ok, err := read(ctx, f.Hash)
	if err != nil || !ok {
		return "", false, err
	}
	// As git tells them: a NUL in the first 8000 bytes makes a file binary.
	if bytes.IndexByte(data[:min(len(data), 8000)], 0) >= 0 {
		return "", false, nil
	}
	return string(data), true, nil
}

// fileDiff is one changed file's unified diff, nil for a binary file.
func fileDiff(ctx context.Context, read blobReader, c change) (*udiff.UnifiedDiff, error) {
	old, oldText, err := content(ctx, read, c.Old)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.Path, err)
	}
	now, newText, err := content(ctx, read, c.New)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.Path, err)
	}
	if !oldText || !newText {
		return nil, nil
	}
	from, to := c.labels()
	d, err := udiff.ToUnifiedDiff(from, to, old, udiff.Lines(old, now), udiff.DefaultContextLines)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.Path, err)
	}
	return &d, nil
}

// diffStat counts what changes changed: the lines of the first
// [event.MaxChangedFiles] files, each file's counts taken from counted
// when it has them (by [countKey]) and kept there; the rest only counted
// as files.
func diffStat(ctx context.Context, read blobReader, changes []change, counted *lru.Cache[string, event.ChangedFile]) (*event.Changes, error) {
	out := &event.Changes{Files: []event.ChangedFile{}}
	if len(changes) > event.MaxChangedFiles {
		out.More = len(changes) - event.MaxChangedFiles
		changes = changes[:event.MaxChangedFiles]
	}
	for _, c := range changes {
		key := countKey(c)
		f, ok := counted.Get(key)
		if !ok {
			d, err := fileDiff(ctx, read, c)
			if err != nil {
				return nil, err
			}
			f = event.ChangedFile{Binary: d == nil}
			if d != nil {
				for _, h := range d.Hunks {
					for _, l := range h.Lines {
						switch l.Kind {
						case udiff.Insert:
							f.Insertions++
						case udiff.Delete:
							f.Deletions++
						}
					}
				}
			}
			counted.Add(key, f)
		}
		f.Path, f.Status = c.Path, c.status()
		out.Insertions += f.Insertions
		out.Deletions += f.Deletions
		out.Files = append(out.Files, f)
	}
	return out, nil
}

// Changes returns what the workspace listed by the manifest files now
// changed since its base, listed by base, reading the contents that differ
// from store. counted caches the lines each change of one content to
// another inserts and deletes, whatever its path: a caller keeping it
// across calls counts again only the files that changed since.
func Changes(ctx context.Context, store jetstream.ObjectStore, base, now []File, counted *lru.Cache[string, event.ChangedFile]) (*event.Changes, error) {
	return diffStat(ctx, storeBlobs(store), compare(base, now), counted)
}

// countKey names what a change compares, whatever its path: the counts
// of lines inserted and deleted depend on the contents alone.
func countKey(c change) string {
	side := func(f *File) string {
		if f == nil {
			return "-"
		}
		return f.Hash + "|" + f.Link
	}
	return side(c.Old) + ">" + side(c.New)
}

// errPatchTooLarge stops a patch past its limit.
var errPatchTooLarge = errors.New("the patch is over its limit")

// writePatch writes changes as a patch git applies (git apply), of at most
// limit bytes: past it, it stops with errPatchTooLarge.
func writePatch(ctx context.Context, w *bytes.Buffer, read blobReader, changes []change, limit int) error {
	for _, c := range changes {
		fmt.Fprintf(w, "diff --git %s %s\n", quotePath("a/"+c.Path), quotePath("b/"+c.Path))
		switch {
		case c.Old == nil:
			fmt.Fprintf(w, "new file mode %s\n", gitMode(c.New.Mode))
		case c.New == nil:
			fmt.Fprintf(w, "deleted file mode %s\n", gitMode(c.Old.Mode))
		case gitMode(c.Old.Mode) != gitMode(c.New.Mode):
			fmt.Fprintf(w, "old mode %s\nnew mode %s\n", gitMode(c.Old.Mode), gitMode(c.New.Mode))
		}
		d, err := fileDiff(ctx, read, c)
		switch {
		case err != nil:
			return err
		case d == nil:
			from, to := c.labels()
			fmt.Fprintf(w, "Binary files %s and %s differ\n", from, to)
		default:
			w.WriteString(d.String())
		}
		if w.Len() > limit {
			return errPatchTooLarge
		}
	}
	return nil
}

// ReadBase returns the base of session of tenant (see [BaseName]) from
// store, nil if it has none.
func ReadBase(ctx context.Context, store jetstream.ObjectStore, tenant string, session uuid.UUID) (*Manifest, error) {
	data, err := store.GetBytes(ctx, BaseName(tenant, session))
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the base of %s: %w", session, err)
	}
	m, err := DecodeManifest(data)
	if err != nil {
		return nil, fmt.Errorf("read the base of %s: %w", session, err)
	}
	return &m, nil
}
