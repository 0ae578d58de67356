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
	"regexp"
	"slices"
	"strings"
	"time"

	"corral.dev/pkg/tool"
	"github.com/bmatcuk/doublestar/v4"
)

const (
	// maxGlobResults caps the paths a Glob call returns.
	maxGlobResults = 1000
	// grepMaxLineLen is how much of a line Grep searches; longer lines
	// (minified code, data) are searched only this far.
	grepMaxLineLen = 64 << 10
)

// searchDir maps a Glob or Grep path argument to a workspace-relative path
// that exists, or returns a model-facing failure.
func searchDir(root *os.Root, p string) (string, fs.FileInfo, *Result) {
	rel, err := tool.WorkspacePath(p)
	if err != nil {
		r := outside(p, err)
		return "", nil, &r
	}
	fi, err := root.Stat(rel)
	if errors.Is(err, fs.ErrNotExist) {
		r := errorf("path does not exist: %s", display(rel))
		return "", nil, &r
	}
	if err != nil {
		r := errorf("cannot open %s: %v", display(rel), unwrapPath(err))
		return "", nil, &r
	}
	return rel, fi, nil
}

// globFiles lists the files matching a doublestar pattern, newest first.
func globFiles(ctx context.Context, root *os.Root, a *tool.GlobArgs) (Result, error) {
	base, pattern := a.Path, a.Pattern
	if path.IsAbs(pattern) {
		// An absolute pattern names its own directory.
		rel, err := tool.WorkspacePath(pattern)
		if err != nil {
			return outside(pattern, err), nil
		}
		base, pattern = "", rel
	}
	if !doublestar.ValidatePattern(pattern) {
		return errorf("invalid glob pattern %q", a.Pattern), nil
	}
	if slices.Contains(strings.Split(pattern, "/"), "..") {
		return errorf("glob pattern %q must not contain ..", a.Pattern), nil
	}
	rel, fi, fail := searchDir(root, base)
	if fail != nil {
		return *fail, nil
	}
	if !fi.IsDir() {
		return errorf("%s is not a directory", display(rel)), nil
	}
	fsys, err := fs.Sub(root.FS(), rel)
	if err != nil {
		return Result{}, fmt.Errorf("glob: %w", err)
	}

	type match struct {
		path string
		mod  time.Time
	}
	var matches []match
	err = doublestar.GlobWalk(fsys, pattern, func(p string, d fs.DirEntry) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		var mod time.Time
		if info, err := d.Info(); err == nil {
			mod = info.ModTime()
		}
		matches = append(matches, match{display(path.Join(rel, p)), mod})
		return nil
	}, doublestar.WithFilesOnly(), doublestar.WithNoFollow())
	if err != nil {
		return Result{}, fmt.Errorf("glob: %w", err)
	}
	if len(matches) == 0 {
		return Result{Output: "No files found"}, nil
	}
	slices.SortFunc(matches, func(x, y match) int {
		if c := y.mod.Compare(x.mod); c != 0 {
			return c
		}
		return strings.Compare(x.path, y.path)
	})
	var b strings.Builder
	for _, m := range matches[:min(len(matches), maxGlobResults)] {
		b.WriteString(m.path)
		b.WriteByte('\n')
	}
	res := Result{}
	if len(matches) > maxGlobResults {
		fmt.Fprintf(&b, "[showing the newest %d of %d files: narrow the pattern or path]\n", maxGlobResults, len(matches))
		res.Truncated = true
	}
	res.Output = b.String()
	return res, nil
}

// grep prints the lines matching an RE2 regexp as path:line:text, searching
// one file or every regular file under a directory (but not .git), skipping
// binary files and symlinks, and keeping only files whose base name (or, if
// the filter has a slash, relative path) matches the glob filter.
func (d *Driver) grep(ctx context.Context, root *os.Root, a *tool.GrepArgs) (Result, error) {
	re, err := regexp.Compile(a.Pattern)
	if err != nil {
		return errorf("invalid regular expression: %v", err), nil
	}
	if a.Glob != "" && !doublestar.ValidatePattern(a.Glob) {
		return errorf("invalid glob filter %q", a.Glob), nil
	}
	rel, fi, fail := searchDir(root, a.Path)
	if fail != nil {
		return *fail, nil
	}
	out := newCappedBuffer(d.cfg.OutputLimit)
	found := 0
	if !fi.IsDir() {
		found = grepFile(root, rel, re, out)
	} else {
		err = fs.WalkDir(root.FS(), rel, func(p string, e fs.DirEntry, err error) error {
			switch {
			case ctx.Err() != nil:
				return ctx.Err()
			case err != nil:
				return nil // unreadable: skip it
			case e.IsDir() && e.Name() == ".git":
				return fs.SkipDir
			case !e.Type().IsRegular():
				return nil
			case a.Glob != "" && !globMatch(a.Glob, p, rel):
				return nil
			}
			found += grepFile(root, p, re, out)
			return nil
		})
	}
	if err != nil {
		return Result{}, fmt.Errorf("grep: %w", err)
	}
	if found == 0 {
		return Result{Output: "No matches found"}, nil
	}
	return Result{Output: out.String(), Truncated: out.truncated()}, nil
}

// globMatch reports whether the file p (under dir) passes the filter.
func globMatch(filter, p, dir string) bool {
	if !strings.Contains(filter, "/") {
		return doublestar.MatchUnvalidated(filter, path.Base(p))
	}
	rel := p
	if dir != "." {
		rel = strings.TrimPrefix(p, dir+"/")
	}
	return doublestar.MatchUnvalidated(filter, rel)
}

// grepFile writes the matching lines of one file to out and counts them.
// Files that cannot be opened or that look binary are skipped silently, and
// a read error ends the file's search.
func grepFile(root *os.Root, rel string, re *regexp.Regexp, out io.StringWriter) int {
	f, _, fail := openRegular(root, rel)
	if fail != nil {
		return 0
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 64<<10)
	if head, _ := br.Peek(sniffLen); bytes.IndexByte(head, 0) >= 0 {
		return 0
	}
	found := 0
	for n := 1; ; n++ {
		line, cut, err := readLine(br, grepMaxLineLen)
		if err != nil {
			return found // EOF or a read error
		}
		if re.Match(line) {
			found++
			out.WriteString(fmt.Sprintf("%s:%d:%s\n", display(rel), n, shown(line, cut)))
		}
	}
}
