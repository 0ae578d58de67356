package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"corral.dev/pkg/tool"
)

// Limits of the file tools, matching what models trained on Claude Code expect.
const (
	readDefaultLimit = 2000      // lines returned when the call gives no limit
	maxLineLen       = 2000      // bytes of a line shown before it is cut
	readMaxBytes     = 256 << 10 // bytes a Read returns before it stops early
	sniffLen         = 8 << 10   // bytes examined for NUL to call a file binary
)

// fileTool runs a Read, Write, Edit, Glob or Grep call on the workspace
// directory through an [os.Root], which refuses paths and symlinks that
// lead outside it. A call that only reads (writes false) is run on an
// empty directory if the workspace is not made yet.
func (d *Driver) fileTool(ctx context.Context, workspace string, args any, writes bool) (Result, error) {
	root, err := os.OpenRoot(workspace)
	if !writes && errors.Is(err, fs.ErrNotExist) {
		// Not made yet: nothing has been written to it.
		root, err = os.OpenRoot(filepath.Join(d.cfg.Dir, emptyDir))
	}
	if err != nil {
		return Result{}, fmt.Errorf("open workspace: %w", err)
	}
	defer root.Close()
	ctx, cancel := context.WithTimeoutCause(ctx, d.cfg.FileTimeout, errFileTimeout)
	defer cancel()
	var res Result
	switch a := args.(type) {
	case *tool.ReadArgs:
		res = readFile(ctx, root, a)
	case *tool.WriteArgs:
		res = writeFile(root, a, d.owner)
	case *tool.EditArgs:
		res = editFile(root, a, d.owner)
	case *tool.GlobArgs:
		res, err = d.globFiles(ctx, root, a)
	case *tool.GrepArgs:
		res, err = d.grep(ctx, root, a)
	default:
		return Result{}, fmt.Errorf("file tool: unsupported arguments %T", args)
	}
	return res, err
}

// emptyDir, under the workspaces' directory, is an empty directory: the
// workspace that calls which only read see until a call writes one. No
// tenant's name begins with a dot.
const emptyDir = ".empty"

// display is how the model sees the workspace-relative path rel.
func display(rel string) string {
	return path.Join(tool.Workspace, rel)
}

// openRegular opens rel for reading if it is a regular file, and otherwise
// returns a model-facing failure. O_NONBLOCK keeps a FIFO from blocking the open.
func openRegular(root *os.Root, rel string) (*os.File, fs.FileInfo, *Result) {
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		r := errorf("file does not exist: %s", display(rel))
		return nil, nil, &r
	}
	if err != nil {
		r := errorf("cannot open %s: %v", display(rel), unwrapPath(err))
		return nil, nil, &r
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		r := errorf("cannot stat %s: %v", display(rel), unwrapPath(err))
		return nil, nil, &r
	}
	if fi.IsDir() {
		f.Close()
		r := errorf("%s is a directory, not a file: use Glob or Bash (ls) to list it", display(rel))
		return nil, nil, &r
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		r := errorf("%s is not a regular file", display(rel))
		return nil, nil, &r
	}
	return f, fi, nil
}

// unwrapPath drops the host-side operation and path from a *fs.PathError,
// which would otherwise show the model workspace-relative names.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// readFile returns the lines of a file numbered like cat -n. It stops,
// saying so, when ctx ends.
func readFile(ctx context.Context, root *os.Root, a *tool.ReadArgs) Result {
	rel, err := tool.WorkspacePath(a.FilePath)
	if err != nil {
		return outside(a.FilePath, err)
	}
	f, fi, fail := openRegular(root, rel)
	if fail != nil {
		return *fail
	}
	defer f.Close()
	show := display(rel)
	if fi.Size() == 0 {
		return Result{Output: fmt.Sprintf("(%s exists but is empty)", show)}
	}
	br := bufio.NewReaderSize(ctxReader{ctx, f}, 64<<10)
	if head, _ := br.Peek(sniffLen); bytes.IndexByte(head, 0) >= 0 {
		return errorf("%s is a binary file: use Bash (for example xxd or file) to inspect it", show)
	}

	offset := max(a.Offset, 1)
	limit := a.Limit
	if limit == 0 {
		limit = readDefaultLimit
	}
	var b strings.Builder
	n := 0 // lines read so far
	for {
		if n == offset-1+limit {
			if _, err := br.Peek(1); err == nil {
				fmt.Fprintf(&b, "[more lines follow: read on with offset=%d]\n", n+1)
			}
			break
		}
		line, cut, err := readLine(br, maxLineLen)
		if err == io.EOF {
			break
		}
		if err != nil && errors.Is(context.Cause(ctx), errFileTimeout) {
			return Result{IsError: true, TimedOut: true, Output: fmt.Sprintf(
				"Read stopped at its time limit after %d lines of %s: read on with a larger offset, or a smaller limit", n, show)}
		}
		if err != nil {
			return errorf("cannot read %s: %v", show, unwrapPath(err))
		}
		n++
		if n < offset {
			continue
		}
		if b.Len()+len(line) > readMaxBytes {
			fmt.Fprintf(&b, "[output stopped at %d KiB: read on with offset=%d]\n", readMaxBytes>>10, n)
			break
		}
		fmt.Fprintf(&b, "%6d\t%s\n", n, shown(line, cut))
	}
	if n < offset {
		return Result{Output: fmt.Sprintf("(%s has %d lines; offset %d is past the end)", show, n, offset)}
	}
	return Result{Output: strings.ToValidUTF8(b.String(), "\uFFFD")}
}

// ctxReader reads from r until ctx is done, then fails with ctx's error.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// readLine reads one line without its newline, keeping at most limit bytes
// of it however long it is; cut reports that it kept less than the whole
// line. It returns io.EOF only when there is no line left.
func readLine(br *bufio.Reader, limit int) (line []byte, cut bool, err error) {
	total := 0
	for {
		chunk, err := br.ReadSlice('\n')
		total += len(chunk)
		// Keep one byte more than limit: the newline, or proof of a cut.
		if room := limit + 1 - len(line); room > 0 {
			line = append(line, chunk[:min(room, len(chunk))]...)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err == io.EOF && total == 0 {
			return nil, false, io.EOF
		}
		if err != nil && err != io.EOF {
			return nil, false, err
		}
		break
	}
	line = bytes.TrimSuffix(line, []byte("\n"))
	if len(line) > limit {
		return line[:limit], true, nil
	}
	return line, false, nil
}

// shown is how a line read with readLine appears to the model.
func shown(line []byte, cut bool) string {
	if len(line) > maxLineLen {
		line, cut = line[:maxLineLen], true
	}
	if cut {
		return string(line) + " [line truncated]"
	}
	return string(line)
}
