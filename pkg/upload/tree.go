package upload

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"runtime"
	"slices"
	"strings"
	"unicode/utf8"

	"golang.org/x/sync/errgroup"
)

// tree is what [Upload] sends: the list of a folder's or an archive's
// entries, and the content of each of its regular files.
type tree struct {
	list List
	// open returns the content of the regular file e.
	open func(e Entry) (io.ReadCloser, error)
	// close releases what the tree holds (an archive, its spooled
	// files).
	close func() error
}

// openTree reads the folder or archive at name into a [tree], hashing
// every file.
func openTree(name string) (*tree, error) {
	info, err := os.Stat(name)
	if err != nil {
		return nil, err
	}
	if info.IsDir() {
		return folderTree(name)
	}
	lower := strings.ToLower(name)
	switch {
	case strings.HasSuffix(lower, ".tar"):
		return tarTree(name, false)
	case strings.HasSuffix(lower, ".tar.gz"), strings.HasSuffix(lower, ".tgz"):
		return tarTree(name, true)
	case strings.HasSuffix(lower, ".zip"):
		return zipTree(name)
	}
	return nil, fmt.Errorf("%s is neither a folder nor a .tar, .tar.gz, .tgz or .zip archive", name)
}

// folderTree reads the folder dir: every directory, regular file and
// symlink in it, symlinks kept as they are and never followed. Anything
// else (a device, a named pipe, a socket) is an error naming it.
func folderTree(dir string) (*tree, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	var list List
	var bytes int64
	var special []string
	err = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == "." {
			return nil
		}
		if !utf8.ValidString(p) {
			return fmt.Errorf("%s: the name %q is not UTF-8, which the upload's list cannot carry: rename it", dir, p)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		e := Entry{Path: p}
		switch t := info.Mode().Type(); t {
		case fs.ModeDir:
			e.Mode = fs.ModeDir | info.Mode().Perm()
		case 0:
			e.Mode, e.Size = info.Mode().Perm(), info.Size()
			bytes += e.Size
		case fs.ModeSymlink:
			if e.Link, err = root.Readlink(p); err != nil {
				return err
			}
			e.Mode = fs.ModeSymlink | 0o777
		default:
			special = append(special, fmt.Sprintf("%s (%s)", p, kind(t)))
			return nil
		}
		list.Files = append(list.Files, e)
		return overBounds(dir, len(list.Files), bytes)
	})
	if err == nil && len(special) > 0 {
		err = specialError(dir, special)
	}
	if err == nil {
		err = hashFiles(root, list.Files)
	}
	if err != nil {
		root.Close()
		return nil, err
	}
	return &tree{
		list:  list,
		open:  func(e Entry) (io.ReadCloser, error) { return root.Open(e.Path) },
		close: root.Close,
	}, nil
}

// hashFiles sets the hash of every regular file of entries, reading them
// from root, several at once.
func hashFiles(root *os.Root, entries []Entry) error {
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i := range entries {
		if entries[i].Mode.Type() != 0 {
			continue
		}
		g.Go(func() error {
			e := &entries[i]
			f, err := root.Open(e.Path)
			if err != nil {
				return err
			}
			defer f.Close()
			h := sha256.New()
			n, err := io.Copy(h, f)
			if err != nil {
				return fmt.Errorf("read %s: %w", e.Path, err)
			}
			e.Size, e.Hash = n, hex.EncodeToString(h.Sum(nil))
			return nil
		})
	}
	return g.Wait()
}

// overBounds returns an error when an upload of name has gone over
// [MaxEntries] entries or [MaxBytes] bytes.
func overBounds(name string, entries int, bytes int64) error {
	switch {
	case entries > MaxEntries:
		return fmt.Errorf("%s holds more than %d files, directories and symlinks, the most one upload may hold", name, MaxEntries)
	case bytes > MaxBytes:
		return fmt.Errorf("%s holds more than %d bytes of files, the most one upload may hold", name, int64(MaxBytes))
	}
	return nil
}

// specialError is the error of an upload of name holding the entries
// special, which are not directories, regular files or symlinks.
func specialError(name string, special []string) error {
	const most = 10
	more := ""
	if len(special) > most {
		more = fmt.Sprintf(", and %d more", len(special)-most)
		special = special[:most]
	}
	return fmt.Errorf("%s holds what cannot be uploaded, only directories, regular files and symlinks can: %s%s",
		name, strings.Join(special, ", "), more)
}

// kind names a file type that is not uploaded.
func kind(t fs.FileMode) string {
	switch {
	case t&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case t&fs.ModeSocket != 0:
		return "a socket"
	case t&fs.ModeCharDevice != 0:
		return "a character device"
	case t&fs.ModeDevice != 0:
		return "a device"
	}
	return "not a regular file"
}

// sortAndFill sorts entries by path, which puts each directory before what
// it holds, and adds the directories an archive holds entries of without
// listing them (mode 0755). It returns an error for an entry inside one
// that is not a directory, or a path listed twice.
func sortAndFill(name string, entries []Entry) ([]Entry, error) {
	seen := make(map[string]fs.FileMode, len(entries))
	for _, e := range entries {
		if _, dup := seen[e.Path]; dup {
			return nil, fmt.Errorf("%s holds %q twice", name, e.Path)
		}
		seen[e.Path] = e.Mode
	}
	for _, e := range entries {
		for dir := path.Dir(e.Path); dir != "."; dir = path.Dir(dir) {
			m, ok := seen[dir]
			if !ok {
				seen[dir] = fs.ModeDir | 0o755
				entries = append(entries, Entry{Path: dir, Mode: fs.ModeDir | 0o755})
				continue
			}
			if !m.IsDir() {
				return nil, fmt.Errorf("%s holds %q inside %q, which is not a directory", name, e.Path, dir)
			}
		}
	}
	slices.SortFunc(entries, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
	return entries, nil
}

// archivePath returns the path in the tree of an archive's entry name:
// without a leading "./" or a trailing slash; "" for the archive's root.
// A name that is absolute or leads out of the archive is an error.
func archivePath(archive, name string) (string, error) {
	p := strings.TrimSuffix(name, "/")
	for strings.HasPrefix(p, "./") {
		p = strings.TrimPrefix(p, "./")
	}
	if p == "." || p == "" {
		return "", nil
	}
	if err := checkPath(p); err != nil {
		return "", fmt.Errorf("%s holds %q, which is not a clean relative path inside the archive", archive, name)
	}
	return p, nil
}

// errChanged is the error of a file that changed between its hashing and
// its upload.
var errChanged = errors.New("changed while it was uploaded; run the command again")
