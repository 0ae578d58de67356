package sandboxmanager

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// A workspace is walked one directory at a time, each opened relative to
// its parent (openat, through [os.Root]): no path handed to the kernel is
// longer than one name, so a tree deeper than PATH_MAX is walked like any
// other, and nothing a session made can lead the walk out of it. Each
// level of depth holds one descriptor open while its subtree is walked.

// bounds are what a walk over a workspace holds it to; 0 is no bound.
type bounds struct {
	files int   // files, directories and links
	bytes int64 // bytes in regular files, by their length
}

// maxDepth bounds how many directories deep a workspace goes: a walk of it
// holds one open directory per level.
const maxDepth = 2048

// sparseSlack is how many bytes of holes a file may have and still be
// snapshotted; see [holes].
const sparseSlack = 1 << 20

// walk calls visit for everything under the workspace dir, parents before
// their contents, names in lexical order: parent is the directory that
// holds it, opened, name its name there and rel its slash-separated path
// in the workspace. An error from visit stops the walk. Past b.files
// entries it stops with an error for the model; b.bytes is visit's to
// enforce.
func walk(dir string, b bounds, visit func(parent *os.Root, name, rel string, info fs.FileInfo) error) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	n := 0
	return walkIn(root, "", b, &n, visit)
}

func walkIn(r *os.Root, rel string, b bounds, n *int, visit func(*os.Root, string, string, fs.FileInfo) error) error {
	d, err := r.Open(".")
	if err != nil {
		return err
	}
	var names []string
	for {
		// In batches, so that a directory of a million entries is
		// refused before it is read whole.
		batch, err := d.Readdirnames(1024)
		names = append(names, batch...)
		if b.files > 0 && *n+len(names) > b.files {
			d.Close()
			return tooManyFiles(b.files)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			d.Close()
			return err
		}
	}
	d.Close()
	*n += len(names)
	slices.Sort(names)
	for _, name := range names {
		info, err := r.Lstat(name)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed meanwhile, by a process still running
		}
		if err != nil {
			return err
		}
		p := path.Join(rel, name)
		if err := visit(r, name, p, info); err != nil {
			return err
		}
		if !info.IsDir() {
			continue
		}
		if strings.Count(p, "/")+1 >= maxDepth {
			return tooDeep(maxDepth)
		}
		sub, err := r.OpenRoot(name)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		err = walkIn(sub, p, b, n, visit)
		sub.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// errBound marks the errors of a workspace over one of its bounds: their
// text is for the model, saying which bound and how to get under it.
var errBound = errors.New("over a bound")

type boundError struct{ msg string }

func (e *boundError) Error() string { return e.msg }
func (e *boundError) Is(target error) bool {
	return target == errBound
}

func tooManyFiles(limit int) error {
	return &boundError{fmt.Sprintf("the workspace holds more than %d files and directories, over its limit (CORRAL_SANDBOX_WORKSPACE_FILES): remove some (build outputs, caches, dependencies that can be fetched again) before going on", limit)}
}

func tooDeep(limit int) error {
	return &boundError{fmt.Sprintf("the workspace has directories more than %d levels deep, over its limit: flatten or remove them before going on", limit)}
}

func tooManyBytes(limit int64) error {
	return &boundError{fmt.Sprintf("the workspace now holds more than %d bytes, over its limit (CORRAL_SANDBOX_WORKSPACE_BYTES): remove files before going on", limit)}
}

func sparseFile(rel string, size, holes int64) error {
	return &boundError{fmt.Sprintf("/workspace/%s is a sparse file (%d bytes long, %d of them holes that take no disk): a snapshot keeps every byte of a file, so sparse files are not kept; remove it, or write it out in full within the workspace's limits", rel, size, holes)}
}

// holes returns how many bytes of f, size bytes long, are holes: ranges
// that read as zeros but take no disk (truncate -s, a seek past the end).
// Snapshots refuse a file with more than [sparseSlack] of them rather
// than count it by its disk use: the store, and every restore, would hold
// its full length, so what the sandbox's disk shows would understate what
// the session costs.
func holes(f *os.File, size int64) (int64, error) {
	fd := int(f.Fd())
	var n, off int64
	for off < size {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			return n + size - off, nil // a hole to the end
		}
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) {
			return 0, nil // a file system that does not say
		}
		if err != nil {
			return 0, err
		}
		n += data - off
		if off, err = unix.Seek(fd, data, unix.SEEK_HOLE); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// workspaceSize is the bytes the regular files of the workspace dir hold,
// for when no snapshot counted them; links are not followed. It stops
// with a bound's error past b.
func workspaceSize(dir string, b bounds) (int64, error) {
	var size int64
	err := walk(dir, b, func(_ *os.Root, _, _ string, info fs.FileInfo) error {
		if info.Mode().IsRegular() {
			size += info.Size()
			if b.bytes > 0 && size > b.bytes {
				return tooManyBytes(b.bytes)
			}
		}
		return nil
	})
	return size, err
}
