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

	"corral.dev/pkg/glob"
	"corral.dev/pkg/tool"
)

const (
	// maxGlobResults caps the paths a Glob call returns.
	maxGlobResults = 1000
	// grepMaxMatches caps the matching lines a Grep call returns.
	grepMaxMatches = 1000
	// grepMaxBytes caps the bytes one Grep call reads.
	grepMaxBytes = 256 << 20
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

// globFiles lists the files matching a glob pattern, newest first. It walks
// the tree once, matching each path as it goes ([glob.Pattern]), and opens
// only directories that may hold a match.
func (d *Driver) globFiles(ctx context.Context, root *os.Root, a *tool.GlobArgs) (Result, error) {
	base, pattern := a.Path, a.Pattern
	if path.IsAbs(pattern) {
		// An absolute pattern names its own directory.
		rel, err := tool.WorkspacePath(pattern)
		if err != nil {
			return outside(pattern, err), nil
		}
		base, pattern = "", rel
	}
	if slices.Contains(strings.Split(pattern, "/"), "..") {
		return errorf("glob pattern %q must not contain ..", a.Pattern), nil
	}
	g, err := glob.Compile(pattern)
	if err != nil {
		return errorf("%v", err), nil
	}
	rel, fi, fail := searchDir(root, base)
	if fail != nil {
		return *fail, nil
	}
	if !fi.IsDir() {
		return errorf("%s is not a directory", display(rel)), nil
	}

	type match struct {
		path string
		mod  time.Time
	}
	var matches []match
	var w walked
	err = walkTree(ctx, root, rel, d.cfg.WalkEntries, &w, func(dir *os.Root, p string, e fs.DirEntry) (bool, error) {
		if e.IsDir() {
			return g.Descend(p), nil
		}
		if !g.Match(p) {
			return false, nil
		}
		var mod time.Time
		if info, err := dir.Lstat(e.Name()); err == nil {
			mod = info.ModTime()
		}
		matches = append(matches, match{display(path.Join(rel, p)), mod})
		return false, nil
	})
	stop, err := walkEnd(ctx, err)
	if err != nil {
		return Result{}, fmt.Errorf("glob: %w", err)
	}
	note := walkNote(stop, w, d.cfg.WalkEntries, d.cfg.FileTimeout.String(), "the list")
	if len(matches) == 0 && note == "" {
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
	if note != "" {
		if len(matches) == 0 {
			b.WriteString("No files found so far\n")
		}
		b.WriteString(note)
		res.Truncated = true
		res.TimedOut = errors.Is(stop, errFileTimeout)
		res.IsError = res.TimedOut
	}
	res.Output = b.String()
	return res, nil
}

// grep prints the lines matching an RE2 regexp as path:line:text, searching
// one file or every regular file under a directory (but not .git), skipping
// binary files and symlinks, and keeping only files whose base name (or, if
// the filter has a slash, relative path) matches the glob filter. It stops
// at [grepMaxMatches] matching lines, after [grepMaxBytes] read, at the
// walk's bound on entries and at the call's deadline, and says so.
func (d *Driver) grep(ctx context.Context, root *os.Root, a *tool.GrepArgs) (Result, error) {
	re, err := regexp.Compile(a.Pattern)
	if err != nil {
		return errorf("invalid regular expression: %v", err), nil
	}
	var filter *glob.Pattern
	if a.Glob != "" {
		if filter, err = glob.Compile(a.Glob); err != nil {
			return errorf("glob filter: %v", err), nil
		}
	}
	rel, fi, fail := searchDir(root, a.Path)
	if fail != nil {
		return *fail, nil
	}
	s := &grepper{ctx: ctx, re: re, out: newCappedBuffer(d.cfg.OutputLimit)}
	var w walked
	if !fi.IsDir() {
		err = s.file(root, rel, rel)
	} else {
		err = walkTree(ctx, root, rel, d.cfg.WalkEntries, &w, func(dir *os.Root, p string, e fs.DirEntry) (bool, error) {
			switch {
			case e.IsDir():
				return e.Name() != ".git", nil
			case !e.Type().IsRegular():
				return false, nil
			case filter != nil && !filterMatch(filter, a.Glob, p):
				return false, nil
			}
			return false, s.file(dir, e.Name(), path.Join(rel, p))
		})
	}
	if errors.Is(err, errGrepDone) {
		err = nil // s.stop says why
	}
	stop, err := walkEnd(ctx, err)
	if err != nil {
		return Result{}, fmt.Errorf("grep: %w", err)
	}
	var note string
	switch {
	case stop != nil:
		note = walkNote(stop, w, d.cfg.WalkEntries, d.cfg.FileTimeout.String(), "the list of matches")
	case s.stop != "":
		note = s.stop
	default:
		note = walkNote(nil, w, 0, "", "")
	}
	if s.found == 0 && note == "" {
		return Result{Output: "No matches found"}, nil
	}
	res := Result{Truncated: s.out.truncated()}
	if note != "" {
		if s.found == 0 {
			s.out.WriteString("No matches found so far\n")
		}
		res.Truncated = true
		res.TimedOut = errors.Is(stop, errFileTimeout)
		res.IsError = res.TimedOut
	}
	// The note goes after the capped output, so it is always seen.
	res.Output = s.out.String()
	if note != "" && !strings.HasSuffix(res.Output, "\n") {
		res.Output += "\n"
	}
	res.Output += note
	return res, nil
}

// filterMatch reports whether the file p, relative to the directory
// searched, passes Grep's glob filter: by base name, or by path if the
// filter has a slash.
func filterMatch(filter *glob.Pattern, spelled, p string) bool {
	if !strings.Contains(spelled, "/") {
		return filter.Match(path.Base(p))
	}
	return filter.Match(p)
}

// grepper is one Grep call's search and what it found so far.
type grepper struct {
	ctx   context.Context
	re    *regexp.Regexp
	out   *cappedBuffer
	found int   // matching lines
	read  int64 // bytes read
	stop  string
}

// errGrepDone ends a Grep's walk at one of its own bounds; stop says which.
var errGrepDone = errors.New("grep: bound reached")

// file writes the matching lines of the file name in dir to the output;
// show is its path below the workspace. Files that cannot be opened or
// that look binary are skipped silently, and a read error ends the file's
// search. It returns ctx's error when ctx is done, and [errGrepDone] at a
// bound of the search.
func (s *grepper) file(dir *os.Root, name, show string) error {
	f, _, fail := openRegular(dir, name)
	if fail != nil {
		return nil
	}
	defer f.Close()
	br := bufio.NewReaderSize(&budgetReader{f, s}, 64<<10)
	if head, _ := br.Peek(sniffLen); bytes.IndexByte(head, 0) >= 0 {
		return s.end()
	}
	for n := 1; ; n++ {
		line, cut, err := readLine(br, grepMaxLineLen)
		if err != nil {
			break // EOF, a read error, the budget or ctx: see end
		}
		if !s.re.Match(line) {
			continue
		}
		if s.found == grepMaxMatches {
			s.stop = fmt.Sprintf("[stopped at %d matching lines: narrow the pattern or path]\n", grepMaxMatches)
			return errGrepDone
		}
		s.found++
		s.out.WriteString(fmt.Sprintf("%s:%d:%s\n", display(show), n, shown(line, cut)))
	}
	return s.end()
}

// end returns why a file's search ended early, if it did: ctx's error, or
// [errGrepDone] at the bound on bytes read.
func (s *grepper) end() error {
	if err := s.ctx.Err(); err != nil {
		return err
	}
	if s.read > grepMaxBytes {
		s.stop = fmt.Sprintf("[stopped after reading %d MiB, the limit: the list of matches is incomplete; narrow the path or the glob filter]\n", grepMaxBytes>>20)
		return errGrepDone
	}
	return nil
}

// budgetReader reads for a grepper: it fails once the grepper's ctx is
// done, and ends once it has read [grepMaxBytes] in all, however long the
// lines, so a file with no newline is not read to its end.
type budgetReader struct {
	r io.Reader
	s *grepper
}

func (b *budgetReader) Read(p []byte) (int, error) {
	if err := b.s.ctx.Err(); err != nil {
		return 0, err
	}
	left := grepMaxBytes - b.s.read
	if left <= 0 {
		b.s.read++ // marks the budget as spent, not merely reached
		return 0, io.EOF
	}
	n, err := b.r.Read(p[:min(int64(len(p)), left)])
	b.s.read += int64(n)
	return n, err
}
