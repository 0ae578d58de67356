package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
)

// maxWalkDepth is how many directories deep a Glob or Grep goes below the
// directory it searches. A walk holds one open directory for each level.
const maxWalkDepth = 256

// errWalkEntries ends a walk that reached its bound on entries.
var errWalkEntries = errors.New("walk: too many entries")

// walked is what a walk met besides its entries: how many it visited, and
// the directories it did not open because they lie too deep.
type walked struct {
	entries int
	tooDeep int
}

// visit is told of each entry of a walk: dir is the open directory holding
// it, rel its path below the directory walked. For a directory, it returns
// whether to go into it. An error ends the walk.
type visit func(dir *os.Root, rel string, e fs.DirEntry) (descend bool, err error)

// walkTree visits every entry below the directory rel of root once, each
// directory's entries in lexical order, descending depth first. It opens
// each directory relative to its parent's open handle ([os.Root.OpenRoot]),
// so no path is looked up from the top again however deep it lies, and
// none can lead out of root. Symlinks are visited, never followed.
//
// It checks ctx at every entry and returns ctx's error when it is done; it
// stops with [errWalkEntries] after limit entries. w counts what it saw,
// until it stops.
func walkTree(ctx context.Context, root *os.Root, rel string, limit int, w *walked, fn visit) error {
	top, err := root.OpenRoot(rel)
	if err != nil {
		return err
	}
	type level struct {
		dir     *os.Root
		rel     string // below the directory walked
		entries []fs.DirEntry
	}
	stack := []*level{{dir: top, rel: ""}}
	defer func() {
		for _, l := range stack {
			l.dir.Close()
		}
	}()
	if stack[0].entries, err = readDir(ctx, top, limit-w.entries); err != nil {
		return err
	}
	for len(stack) > 0 {
		l := stack[len(stack)-1]
		if len(l.entries) == 0 {
			l.dir.Close()
			stack = stack[:len(stack)-1]
			continue
		}
		e := l.entries[0]
		l.entries = l.entries[1:]
		if err := ctx.Err(); err != nil {
			return err
		}
		if w.entries >= limit {
			return errWalkEntries
		}
		w.entries++
		p := path.Join(l.rel, e.Name())
		descend, err := fn(l.dir, p, e)
		if err != nil {
			return err
		}
		if !descend || !e.IsDir() {
			continue
		}
		if len(stack) > maxWalkDepth {
			w.tooDeep++
			continue
		}
		sub, err := l.dir.OpenRoot(e.Name())
		if err != nil {
			continue // gone, or not a directory any more: skip it
		}
		entries, err := readDir(ctx, sub, limit-w.entries)
		if err != nil {
			sub.Close()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			continue // unreadable: skip it
		}
		stack = append(stack, &level{dir: sub, rel: p, entries: entries})
	}
	return nil
}

// readDir returns the entries of dir sorted by name, reading at most
// limit+1 of them: more is for the walk to find when it gets there.
func readDir(ctx context.Context, dir *os.Root, limit int) ([]fs.DirEntry, error) {
	f, err := dir.Open(".")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var all []fs.DirEntry
	for len(all) <= limit {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		batch, err := f.ReadDir(1024)
		all = append(all, batch...)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	slices.SortFunc(all, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return all, nil
}

// errFileTimeout is the cause of a file tool's context ending at its
// deadline, [Config.FileTimeout].
var errFileTimeout = errors.New("file tool timed out")

// walkEnd sorts how a walk ended: stop is why it ended early, which the
// model is told of with what was found until then ([errFileTimeout] or
// [errWalkEntries]); fail is an error that means the call could not be
// carried out, such as the call's own context ending (a stop, a shutdown).
func walkEnd(ctx context.Context, err error) (stop, fail error) {
	switch {
	case err == nil:
		return nil, nil
	case errors.Is(err, errWalkEntries):
		return err, nil
	case ctx.Err() != nil && errors.Is(context.Cause(ctx), errFileTimeout):
		return errFileTimeout, nil
	}
	return nil, err
}

// walkNote tells the model how a walk ended early, if it did: at its
// deadline, at its bound on entries, or short of directories too deep.
// what names the tool's output ("the list", "the matches").
func walkNote(err error, w walked, limit int, timeout string, what string) string {
	var b strings.Builder
	switch {
	case errors.Is(err, errFileTimeout):
		fmt.Fprintf(&b, "[stopped at the time limit of %s after looking at %d entries: %s is incomplete; narrow the pattern or path]\n", timeout, w.entries, what)
	case errors.Is(err, errWalkEntries):
		fmt.Fprintf(&b, "[stopped after looking at %d entries, the limit: %s is incomplete; narrow the pattern or path]\n", limit, what)
	}
	if w.tooDeep > 0 {
		fmt.Fprintf(&b, "[%d directories more than %d levels deep were not searched]\n", w.tooDeep, maxWalkDepth)
	}
	return b.String()
}
