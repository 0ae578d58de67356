package sandbox

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"

	"corral.dev/pkg/tool"
)

// editMaxBytes is the largest file Edit changes, before and after: it
// holds the whole file in memory.
const editMaxBytes = 16 << 20

// writeFile writes a whole file, creating its parent directories.
func writeFile(root *os.Root, a *tool.WriteArgs, o *owner) Result {
	rel, err := tool.WorkspacePath(a.FilePath)
	if err != nil {
		return outside(a.FilePath, err)
	}
	show := display(rel)
	if rel == "." {
		return errorf("%s is a directory, not a file", show)
	}
	if dir := path.Dir(rel); dir != "." {
		if err := o.mkdirAll(root, dir, 0o755); err != nil {
			return errorf("cannot create directory %s: %v", display(dir), unwrapPath(err))
		}
	}
	perm := fs.FileMode(0o644)
	fi, err := root.Stat(rel)
	switch {
	case err == nil && fi.IsDir():
		return errorf("%s is a directory, not a file", show)
	case err == nil:
		perm = fi.Mode().Perm()
	case !errors.Is(err, fs.ErrNotExist):
		return errorf("cannot write %s: %v", show, unwrapPath(err))
	}
	if err := writeAtomic(root, rel, []byte(a.Content), perm, o); err != nil {
		return errorf("cannot write %s: %v", show, unwrapPath(err))
	}
	return Result{Output: fmt.Sprintf("Wrote %d bytes to %s", len(a.Content), show)}
}

// editFile replaces old_string with new_string in an existing file: exactly
// one occurrence, or every one if replace_all is set.
func editFile(root *os.Root, a *tool.EditArgs, o *owner) Result {
	rel, err := tool.WorkspacePath(a.FilePath)
	if err != nil {
		return outside(a.FilePath, err)
	}
	show := display(rel)
	f, fi, fail := openRegular(root, rel)
	if fail != nil {
		return *fail
	}
	if fi.Size() > editMaxBytes {
		f.Close()
		return errorf("%s is %d bytes; Edit changes files of up to %d MiB: use Bash (sed, for one) on larger ones", show, fi.Size(), editMaxBytes>>20)
	}
	data, err := io.ReadAll(io.LimitReader(f, editMaxBytes+1))
	f.Close()
	if err != nil {
		return errorf("cannot read %s: %v", show, unwrapPath(err))
	}
	if len(data) > editMaxBytes {
		return errorf("%s grew past %d MiB while being read: Edit changes files of up to %d MiB", show, editMaxBytes>>20, editMaxBytes>>20)
	}
	content, n, err := tool.ApplyEdit(show, string(data), a, editMaxBytes)
	var e *tool.EditError
	switch {
	case errors.As(err, &e) && e.Kind == tool.EditTooLarge:
		return errorf("%v; Edit makes files of up to %d MiB", err, editMaxBytes>>20)
	case err != nil:
		return errorf("%v", err)
	}
	if err := writeAtomic(root, rel, []byte(content), fi.Mode().Perm(), o); err != nil {
		return errorf("cannot write %s: %v", show, unwrapPath(err))
	}
	return Result{Output: fmt.Sprintf("Edited %s: replaced %d %s", show, n, plural(n, "occurrence"))}
}

// writeAtomic replaces name with data: it writes a temporary file beside it
// and renames it into place, so nobody sees a half-written file. A symlink
// at name is replaced, not followed. The file is handed to o, if not nil.
func writeAtomic(root *os.Root, name string, data []byte, perm fs.FileMode, o *owner) error {
	tmp := path.Join(path.Dir(name), "."+path.Base(name)+".tmp-"+rand.Text()[:10])
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	err = o.chown(f)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Chmod(perm) // OpenFile's perm is subject to the umask
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, name)
	}
	if err != nil {
		_ = root.Remove(tmp)
		return err
	}
	return nil
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
