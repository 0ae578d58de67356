package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"corral.dev/pkg/tool"
	"github.com/google/uuid"
)

// bomb is the pattern that made Glob walk a tree once for every way its **
// could split a path: minutes over a few thousand entries.
const bomb = "**/**/**/**/**/**/zzz"

// makeTree makes about 3,000 entries six levels deep in session's
// workspace, from the host side.
func makeTree(t *testing.T, d *Driver, session uuid.UUID) {
	t.Helper()
	ws := d.Workspace(tenant, session)
	for i := range 6 {
		for j := range 6 {
			dir := filepath.Join(ws, fmt.Sprint("a", i), fmt.Sprint("b", j), "c", "d", "e")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for k := range 80 {
				if err := os.WriteFile(filepath.Join(dir, fmt.Sprint("f", k)), []byte("x\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// runWithin runs one call and fails the test if it has not returned
// within limit.
func runWithin(t *testing.T, ctx context.Context, d *Driver, session uuid.UUID, args any, limit time.Duration) (Result, error) {
	t.Helper()
	type ran struct {
		res Result
		err error
	}
	done := make(chan ran, 1)
	go func() {
		res, err := d.Run(ctx, who(tenant, session), args)
		done <- ran{res, err}
	}()
	select {
	case r := <-done:
		return r.res, r.err
	case <-time.After(limit):
		t.Fatalf("%T call still running after %s", args, limit)
		return Result{}, nil
	}
}

func TestGlobBombEndsAtDeadline(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{FileTimeout: time.Millisecond})
	session := uuid.New()
	makeTree(t, d, session)
	res, err := runWithin(t, t.Context(), d, session, &tool.GlobArgs{Pattern: bomb}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !res.TimedOut || !strings.Contains(res.Output, "stopped at the time limit of 1ms") {
		t.Errorf("Glob(%s) = %q (IsError %v, TimedOut %v); want it stopped at its time limit", bomb, res.Output, res.IsError, res.TimedOut)
	}
}

func TestGlobBombEndsWhenCancelled(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{})
	session := uuid.New()
	makeTree(t, d, session)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := runWithin(t, ctx, d, session, &tool.GlobArgs{Pattern: bomb}, 10*time.Second)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Glob with its context cancelled: err = %v, want context.Canceled", err)
	}
}

func TestGlobBombIsQuick(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{})
	session := uuid.New()
	makeTree(t, d, session)
	ws := d.Workspace(tenant, session)
	if err := os.WriteFile(filepath.Join(ws, "a1/b2/c/d/zzz"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := runWithin(t, t.Context(), d, session, &tool.GlobArgs{Pattern: bomb}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.Output != "/workspace/a1/b2/c/d/zzz\n" || res.IsError {
		t.Errorf("Glob(%s) = %q (IsError %v)", bomb, res.Output, res.IsError)
	}
}

func TestWalkBounds(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{WalkEntries: 500})
	session := uuid.New()
	makeTree(t, d, session)
	ws := d.Workspace(tenant, session)
	deep := filepath.Join(ws, strings.Repeat("q/", maxWalkDepth+5))
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(deep, "x.go"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args any
		want string
	}{
		{"glob entries", &tool.GlobArgs{Pattern: "**/f1"}, "[stopped after looking at 500 entries, the limit: the list is incomplete; narrow the pattern or path]\n"},
		{"grep entries", &tool.GrepArgs{Pattern: "y"}, "No matches found so far\n[stopped after looking at 500 entries, the limit: the list of matches is incomplete; narrow the pattern or path]\n"},
		{"glob depth", &tool.GlobArgs{Pattern: "**/x.go", Path: "q"}, "No files found so far\n[1 directories more than 256 levels deep were not searched]\n"},
		{"grep depth", &tool.GrepArgs{Pattern: "x", Path: "q"}, "No matches found so far\n[1 directories more than 256 levels deep were not searched]\n"},
		{"pattern", &tool.GlobArgs{Pattern: strings.Repeat("**/a/", 9)}, "limit is 8"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := run(t, d, session, tc.args)
			if !strings.HasSuffix(res.Output, tc.want) && !strings.Contains(res.Output, tc.want) {
				t.Errorf("%+v = %q, want it to end %q", tc.args, res.Output, tc.want)
			}
		})
	}
}

func TestGrepBounds(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{})
	session := uuid.New()
	ws := d.Workspace(tenant, session)
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	// 300 MiB with no newline after a first text page (so it is not
	// binary): read only to the budget, not to its end.
	huge := filepath.Join(ws, "huge")
	if err := os.WriteFile(huge, []byte(strings.Repeat("z", sniffLen+1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(huge, 300<<20); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "a-many"), []byte(strings.Repeat("m\n", grepMaxMatches+10)), 0o644); err != nil {
		t.Fatal(err)
	}
	res := run(t, d, session, &tool.GrepArgs{Pattern: "m", Path: "a-many"})
	if !strings.HasSuffix(res.Output, "[stopped at 1000 matching lines: narrow the pattern or path]\n") || !res.Truncated {
		t.Errorf("Grep on many matches ends %q (Truncated %v)", res.Output[max(0, len(res.Output)-100):], res.Truncated)
	}
	res = run(t, d, session, &tool.GrepArgs{Pattern: "never", Path: "huge"})
	if !strings.Contains(res.Output, "[stopped after reading 256 MiB, the limit") {
		t.Errorf("Grep on a 300 MiB line = %q", res.Output)
	}
}

func TestEditBounds(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{})
	session := uuid.New()
	writeHost(t, d, session, map[string]string{"small": strings.Repeat("a", 1000)})
	ws := d.Workspace(tenant, session)
	f, err := os.Create(filepath.Join(ws, "big"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(editMaxBytes + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	res := run(t, d, session, &tool.EditArgs{FilePath: "big", OldString: "x", NewString: "y"})
	if !res.IsError || !strings.Contains(res.Output, "Edit changes files of up to 16 MiB") {
		t.Errorf("Edit of a big file = %q", res.Output)
	}
	// 1000 occurrences each made 512 KiB would be 500 MiB.
	res = run(t, d, session, &tool.EditArgs{FilePath: "small", OldString: "a", NewString: strings.Repeat("b", tool.MaxContentBytes), ReplaceAll: true})
	if !res.IsError || !strings.Contains(res.Output, "Edit makes files of up to 16 MiB") {
		t.Errorf("Edit that grows a file past the bound = %q", res.Output)
	}
}
