package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"unicode/utf8"

	"github.com/google/uuid"

	"corral.dev/pkg/preview"
	"corral.dev/pkg/tool"
)

// Preview returns what Edit call a would change in a session's workspace,
// for a reviewer: the unified diff it would make to its file as the file
// is now, or a line saying why there is none (the file is not there, is
// not a regular file, is binary, not UTF-8 or larger than [preview.MaxBytes], or the
// Edit cannot apply to it). It reads the file from the manager's side, as
// the file tools do, through an [os.Root]; it starts no sandbox and does
// not wait for the session's running call (Write and Edit replace a file
// whole, so it is seen before or after). An error means the tenant or
// session is not valid.
func (d *Driver) Preview(tenant string, session uuid.UUID, a *tool.EditArgs) (string, error) {
	dir, err := d.workspace(tenant, session)
	if err != nil {
		return "", err
	}
	rel, err := tool.WorkspacePath(a.FilePath)
	if err != nil {
		return preview.NoDiff("%s: the Edit will be refused", outside(a.FilePath, err).Output), nil
	}
	show := display(rel)
	root, err := os.OpenRoot(dir)
	if errors.Is(err, fs.ErrNotExist) {
		// Not made yet: nothing has been written to it.
		return preview.NoDiff("%s does not exist: the Edit will be refused", show), nil
	}
	if err != nil {
		return "", fmt.Errorf("open workspace: %w", err)
	}
	defer root.Close()
	f, fi, fail := openRegular(root, rel)
	if fail != nil {
		return preview.NoDiff("%s: the Edit will be refused", fail.Output), nil
	}
	defer f.Close()
	if fi.Size() > preview.MaxBytes {
		return preview.NoDiff("%s is %d bytes: previews are made of files of up to %d MiB", show, fi.Size(), preview.MaxBytes>>20), nil
	}
	data, err := io.ReadAll(io.LimitReader(f, preview.MaxBytes+1))
	if err != nil {
		return preview.NoDiff("cannot read %s: %v", show, unwrapPath(err)), nil
	}
	if len(data) > preview.MaxBytes {
		return preview.NoDiff("%s grew past %d MiB while being read: previews are made of files of up to %d MiB", show, preview.MaxBytes>>20, preview.MaxBytes>>20), nil
	}
	switch {
	case bytes.IndexByte(data, 0) >= 0:
		return preview.NoDiff("%s is a binary file: previews are made of text files", show), nil
	case !utf8.Valid(data):
		return preview.NoDiff("%s is not UTF-8 text: previews are made of text files", show), nil
	}
	diff, err := preview.Edit(show, string(data), a)
	if err != nil {
		return preview.NoDiff("%v", err), nil
	}
	return diff, nil
}
