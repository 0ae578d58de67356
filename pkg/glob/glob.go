// Package glob matches slash-separated paths against the glob patterns the
// model writes for Glob and Grep: * and ? within a name, [abc] and [!abc]
// classes, {a,b} alternatives, \ escapes, and ** for any number of whole
// directories.
//
// A [Pattern] matches a path in time proportional to the pattern's length
// times the path's, however many ** it has: it runs the pattern's names as
// a small automaton over the path's names instead of trying each way the
// ** could split the path. So a tree is walked once, each path matched as
// it is met, and [Pattern.Descend] says which directories cannot lead to a
// match and need not be opened. [Compile] bounds the pattern itself: its
// length, its ** and its alternatives.
package glob

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// Bounds on a pattern, enforced by [Compile].
const (
	// MaxPatternBytes is the longest pattern.
	MaxPatternBytes = 1024
	// MaxDoubleStars is the most ** names one alternative may have.
	MaxDoubleStars = 8
	// MaxAlternatives is the most patterns {a,b} alternatives may expand to.
	MaxAlternatives = 64
)

// ErrBadPattern is wrapped by every error [Compile] returns; the message
// says what is wrong in words the model can act on.
var ErrBadPattern = errors.New("invalid glob pattern")

// Pattern is a compiled glob pattern. It is safe for concurrent use.
type Pattern struct {
	alts [][]string // each alternative's names; "**" is any run of names
}

// Compile parses a glob pattern. A leading or doubled slash is ignored:
// patterns are relative to the directory searched. Errors wrap
// [ErrBadPattern].
func Compile(pattern string) (*Pattern, error) {
	if len(pattern) > MaxPatternBytes {
		return nil, fmt.Errorf("%w: it is %d bytes long; the limit is %d", ErrBadPattern, len(pattern), MaxPatternBytes)
	}
	alts, err := expand(pattern)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v", ErrBadPattern, pattern, err)
	}
	p := &Pattern{}
	for _, alt := range alts {
		var names []string
		stars := 0
		for _, n := range strings.Split(alt, "/") {
			switch {
			case n == "":
				continue
			case n == "**":
				stars++
				if len(names) > 0 && names[len(names)-1] == "**" {
					continue // **/** is **
				}
			default:
				n = bang(n)
				if _, err := path.Match(n, ""); err != nil {
					return nil, fmt.Errorf("%w %q: malformed name %q (an unclosed [ or a trailing \\)", ErrBadPattern, pattern, n)
				}
			}
			names = append(names, n)
		}
		if stars > MaxDoubleStars {
			return nil, fmt.Errorf("%w %q: it has %d ** parts; the limit is %d", ErrBadPattern, pattern, stars, MaxDoubleStars)
		}
		p.alts = append(p.alts, names)
	}
	return p, nil
}

// Match reports whether the slash-separated relative path name matches.
func (p *Pattern) Match(name string) bool {
	names := split(name)
	for _, alt := range p.alts {
		if st := run(alt, names); st != nil && st[len(alt)] {
			return true
		}
	}
	return false
}

// Descend reports whether some path under the directory dir (relative,
// slash-separated; "" or "." for the top) could match: a walk need not
// open a directory for which it is false.
func (p *Pattern) Descend(dir string) bool {
	names := split(dir)
	for _, alt := range p.alts {
		if st := run(alt, names); st != nil && slicesAny(st[:len(alt)]) {
			return true
		}
	}
	return false
}

// run feeds names to the automaton whose states are the positions in alt:
// it returns which positions are reached, or nil when none is.
func run(alt []string, names []string) []bool {
	cur := closure(alt, make([]bool, len(alt)+1), 0)
	next := make([]bool, len(alt)+1)
	for _, n := range names {
		clear(next)
		live := false
		for i, on := range cur[:len(alt)] {
			if !on {
				continue
			}
			if alt[i] == "**" {
				next[i] = true // ** takes this name and stays
				live = true
			} else if ok, _ := path.Match(alt[i], n); ok {
				closure(alt, next, i+1)
				live = true
			}
		}
		if !live {
			return nil
		}
		for i, on := range next {
			if on && i < len(alt) && alt[i] == "**" {
				closure(alt, next, i)
			}
		}
		cur, next = next, cur
	}
	return cur
}

// closure marks state i and the states after it that a run of ** reaches
// without taking a name.
func closure(alt []string, st []bool, i int) []bool {
	for ; i <= len(alt); i++ {
		st[i] = true
		if i == len(alt) || alt[i] != "**" {
			break
		}
	}
	return st
}

func split(name string) []string {
	var names []string
	for _, n := range strings.Split(name, "/") {
		if n != "" && n != "." {
			names = append(names, n)
		}
	}
	return names
}

func slicesAny(st []bool) bool {
	for _, on := range st {
		if on {
			return true
		}
	}
	return false
}

// bang rewrites a shell's [!abc] as path.Match's [^abc].
func bang(n string) string {
	if !strings.Contains(n, "[!") {
		return n
	}
	b := []byte(n)
	for i := 0; i < len(b); i++ {
		switch {
		case b[i] == '\\':
			i++
		case b[i] == '[' && i+1 < len(b) && b[i+1] == '!':
			b[i+1] = '^'
		}
	}
	return string(b)
}

// expand returns the patterns that pattern's {a,b} alternatives stand for,
// at most [MaxAlternatives] of them.
func expand(pattern string) ([]string, error) {
	open := -1
	depth := 0
	var commas []int
	for i := 0; i < len(pattern); i++ {
		switch pattern[i] {
		case '\\':
			i++
		case '[':
			// A class may hold { , and }; skip to its ].
			j := i + 1
			if j < len(pattern) && (pattern[j] == '^' || pattern[j] == '!') {
				j++
			}
			if j < len(pattern) && pattern[j] == ']' {
				j++
			}
			for j < len(pattern) && pattern[j] != ']' {
				if pattern[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(pattern) {
				return nil, errors.New("an unclosed [")
			}
			i = j
		case '{':
			if depth == 0 {
				open = i
			}
			depth++
		case ',':
			if depth == 1 {
				commas = append(commas, i)
			}
		case '}':
			if depth == 0 {
				return nil, errors.New("a } without its {")
			}
			depth--
			if depth > 0 {
				continue
			}
			prefix, suffix := pattern[:open], pattern[i+1:]
			var out []string
			start := open + 1
			for _, end := range append(commas, i) {
				more, err := expand(prefix + pattern[start:end] + suffix)
				if err != nil {
					return nil, err
				}
				out = append(out, more...)
				if len(out) > MaxAlternatives {
					return nil, fmt.Errorf("its {} alternatives make more than %d patterns", MaxAlternatives)
				}
				start = end + 1
			}
			return out, nil
		}
	}
	if depth > 0 {
		return nil, errors.New("an unclosed {")
	}
	return []string{pattern}, nil
}
