package glob_test

import (
	"errors"
	"path"
	"strings"
	"testing"
	"time"

	"corral.dev/pkg/glob"
)

// reference matches by trying every way each ** could split the path,
// with path.Match on single names: slow, but plainly right.
func reference(pattern []string, names []string) bool {
	if len(pattern) == 0 {
		return len(names) == 0
	}
	if pattern[0] == "**" {
		for i := 0; i <= len(names); i++ {
			if reference(pattern[1:], names[i:]) {
				return true
			}
		}
		return false
	}
	if len(names) == 0 {
		return false
	}
	ok, _ := path.Match(pattern[0], names[0])
	return ok && reference(pattern[1:], names[1:])
}

// tree is a small tree's files and directories.
var tree = []string{
	"a", "b.go", ".hidden", "x/a.go", "x/b.txt", "x/y/c.go", "x/y/z/d.go", "x/y/z/zzz",
	"x/.git/config", "src/main.go", "src/main_test.go", "src/pkg/a/a.go", "src/pkg/a/b/a.go",
	"a/a/a/a/a", "a/b/a/b", "zzz", "q?", "[x]",
}

func TestMatchAgreesWithReference(t *testing.T) {
	t.Parallel()
	patterns := []string{
		"*", "**", "*.go", "**/*.go", "x/**", "x/**/*.go", "**/y/**", "**/a", "a/**/a",
		"**/**/**/**/**/zzz", "**/z*", "x/*/z/?.go", "src/*_test.go", "**/[ab].go", "**/[!a].go",
		"**/.git/*", "src/**/b/**/a.go", "a/*/a/*/a", "**/a/**/b", "?", "**/?", "x/y", "nope/**",
		"**/*/*/*", "\\[x]", "q\\?", "**/a/a/**/a",
	}
	for _, p := range patterns {
		g, err := glob.Compile(p)
		if err != nil {
			t.Fatalf("Compile(%q): %v", p, err)
		}
		// path.Match spells a negated class [^a], where shells write [!a].
		ref := strings.Split(strings.ReplaceAll(p, "[!", "[^"), "/")
		for _, f := range tree {
			if got, want := g.Match(f), reference(ref, strings.Split(f, "/")); got != want {
				t.Errorf("Compile(%q).Match(%q) = %v, reference says %v", p, f, got, want)
			}
			// Descend must never prune a directory holding a match.
			if g.Match(f) {
				for d := path.Dir(f); d != "."; d = path.Dir(d) {
					if !g.Descend(d) {
						t.Errorf("Compile(%q).Descend(%q) = false, but %q under it matches", p, d, f)
					}
				}
			}
		}
	}
}

func TestAlternatives(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern string
		match   []string
		miss    []string
	}{
		{"*.{go,md}", []string{"a.go", "b.md"}, []string{"c.txt", "x/a.go"}},
		{"{src,cmd}/**/*.go", []string{"src/a.go", "cmd/x/y.go"}, []string{"pkg/a.go"}},
		{"{a,{b,c}}", []string{"a", "b", "c"}, []string{"d", "{a,b}"}},
		{"[{]x", []string{"{x"}, []string{"x"}},
		{"\\{a,b\\}", []string{"{a,b}"}, []string{"a"}},
		{"{a/b,c}/d", []string{"a/b/d", "c/d"}, []string{"a/d"}},
	}
	for _, tc := range tests {
		g, err := glob.Compile(tc.pattern)
		if err != nil {
			t.Fatalf("Compile(%q): %v", tc.pattern, err)
		}
		for _, m := range tc.match {
			if !g.Match(m) {
				t.Errorf("Compile(%q).Match(%q) = false, want true", tc.pattern, m)
			}
		}
		for _, m := range tc.miss {
			if g.Match(m) {
				t.Errorf("Compile(%q).Match(%q) = true, want false", tc.pattern, m)
			}
		}
	}
}

func TestCompileRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, pattern, says string }{
		{"long", strings.Repeat("a", glob.MaxPatternBytes+1), "limit is 1024"},
		{"stars", strings.Repeat("**/a/", glob.MaxDoubleStars+1), "** parts"},
		{"alternatives", strings.Repeat("{a,b}", 7), "more than 64 patterns"},
		{"unclosed brace", "{a,b", "unclosed {"},
		{"stray brace", "a}", "without its {"},
		{"unclosed class", "[ab", "unclosed ["},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := glob.Compile(tc.pattern)
			if !errors.Is(err, glob.ErrBadPattern) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("Compile(%.40q) = %v, want an ErrBadPattern saying %q", tc.pattern, err, tc.says)
			}
		})
	}
}

// TestManyStarsOnADeepPathIsQuick matches a pattern of eight ** against a
// path 2,000 names deep, which trying each split of the path would take
// longer than the universe has existed to refuse.
func TestManyStarsOnADeepPathIsQuick(t *testing.T) {
	t.Parallel()
	g, err := glob.Compile(strings.Repeat("**/a/", 8) + "zzz")
	if err != nil {
		t.Fatal(err)
	}
	deep := strings.Repeat("a/", 2000) + "b"
	start := time.Now()
	if g.Match(deep) {
		t.Errorf("Match(deep) = true, want false")
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Match took %s", took)
	}
}
