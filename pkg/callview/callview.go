// Package callview renders a tool call for the people who decide on it:
// every argument, in full, with the code points that a screen would not
// show as written (bidirectional overrides, zero-width characters,
// controls) made visible. The CLI, the Slack bridge and the reviewers'
// page all render a held call through it, so that what a reviewer reads
// is what runs.
package callview

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Piece is a run of text: shown as it is, or, when Hidden, one code point
// a screen would not show as written, with Text its visible name
// ("<U+202E>").
type Piece struct {
	Text   string
	Hidden bool
}

// hidden reports whether r is a code point that would not read as
// itself: a control other than newline and tab, a format character (the
// bidirectional controls, zero-width spaces and joiners, tags), a space
// other than the ASCII one, a line or paragraph separator, or a default
// ignorable one (variation selectors, Hangul fillers).
func hidden(r rune) bool {
	switch {
	case r == '\n' || r == '\t' || r == ' ':
		return false
	case r == utf8.RuneError:
		return true
	}
	return unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zs, unicode.Zl, unicode.Zp,
		unicode.Other_Default_Ignorable_Code_Point, unicode.Variation_Selector) ||
		r == '\u115F' || r == '\u1160' || r == '\u3164' || r == '\uFFA0'
}

// Name is how a hidden code point is shown: <U+202E>.
func Name(r rune) string { return fmt.Sprintf("<U+%04X>", r) }

// Split cuts s into pieces, each hidden code point one piece of its own.
// Invalid UTF-8 shows as <U+FFFD>, one per bad byte.
func Split(s string) []Piece {
	var out []Piece
	start := 0
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if !hidden(r) {
			i += n
			continue
		}
		if start < i {
			out = append(out, Piece{Text: s[start:i]})
		}
		out = append(out, Piece{Text: Name(r), Hidden: true})
		i += n
		start = i
	}
	if start < len(s) {
		out = append(out, Piece{Text: s[start:]})
	}
	return out
}

// Visible returns s with each hidden code point written as its name, and
// how many there were.
func Visible(s string) (string, int) {
	var b strings.Builder
	n := 0
	for _, p := range Split(s) {
		b.WriteString(p.Text)
		if p.Hidden {
			n++
		}
	}
	return b.String(), n
}

// Arg is one argument of a call, its value in full: a string as it is,
// anything else as compact JSON.
type Arg struct {
	Name, Value string
}

// order is the order the arguments of the built-in tools are shown in;
// any other argument follows, by name.
var order = []string{"command", "file_path", "path", "pattern", "glob", "old_string", "new_string", "replace_all", "content", "offset", "limit", "timeout", "description"}

// Args returns every argument of a call's input, the built-in tools' in
// the order they read best, then the rest by name. Input that is not a
// JSON object is one argument named "input", as it is.
func Args(input json.RawMessage) []Arg {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(input, &m); err != nil || m == nil {
		return []Arg{{Name: "input", Value: string(input)}}
	}
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	rank := func(k string) int {
		if i := slices.Index(order, k); i >= 0 {
			return i
		}
		return len(order)
	}
	slices.SortFunc(names, func(a, b string) int {
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra - rb
		}
		return strings.Compare(a, b)
	})
	out := make([]Arg, 0, len(names))
	for _, k := range names {
		var s string
		if json.Unmarshal(m[k], &s) != nil {
			s = Plain(m[k])
		}
		out = append(out, Arg{Name: k, Value: s})
	}
	return out
}

// Plain is raw JSON on one line as it reads: compact, with the strings'
// characters as written (encoding/json writes <, > and & as \u003c,
// \u003e and \u0026 for HTML, and a stored event holds them so). Input
// that is not JSON is returned as it is.
func Plain(raw json.RawMessage) string {
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if dec.Decode(&v) != nil {
		return string(raw)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if enc.Encode(v) != nil {
		return string(raw)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// Unescaped is JSON text, whole or cut short, with the escapes that
// encoding/json writes for HTML (\u0026, \u003c and \u003e) turned back into the characters they stand for: a stored
// call's summary, say, as a person reads it. An escaped backslash stays
// escaped, so that "\\u0026" (a backslash, then "u0026") is left alone.
func Unescaped(s string) string {
	if !strings.Contains(s, `\u`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		if s[i+1] != 'u' || i+6 > len(s) {
			b.WriteString(s[i : i+2]) // \\, \" and the rest stay as written
			i++
			continue
		}
		switch s[i+2 : i+6] {
		case "0026":
			b.WriteByte('&')
		case "003c", "003C":
			b.WriteByte('<')
		case "003e", "003E":
			b.WriteByte('>')
		default:
			b.WriteString(s[i : i+6])
		}
		i += 5
	}
	return b.String()
}

// Text is a call as plain text: the tool, then each argument, a one-line
// value after its name and a longer one on the lines below, then the
// preview, if any, and a count of the hidden code points shown by name.
// Nothing is cut.
func Text(tool string, input json.RawMessage, preview string) string {
	var b strings.Builder
	hiddenN := 0
	vis := func(s string) string {
		v, n := Visible(s)
		hiddenN += n
		return v
	}
	fmt.Fprintf(&b, "tool: %s\n", vis(tool))
	for _, a := range Args(input) {
		v := vis(a.Value)
		if strings.Contains(v, "\n") || len(v) > 80 {
			fmt.Fprintf(&b, "%s: (%d bytes)\n", vis(a.Name), len(a.Value))
			for line := range strings.Lines(v) {
				b.WriteString("  | " + strings.TrimSuffix(line, "\n") + "\n")
			}
			continue
		}
		fmt.Fprintf(&b, "%s: %s\n", vis(a.Name), v)
	}
	if preview != "" {
		b.WriteString("preview of the change (informational, not what is approved):\n")
		b.WriteString(vis(preview))
		if !strings.HasSuffix(preview, "\n") {
			b.WriteString("\n")
		}
	}
	if hiddenN > 0 {
		fmt.Fprintf(&b, "note: %d invisible or bidirectional code point(s) shown as <U+XXXX>\n", hiddenN)
	}
	return b.String()
}

// Summary is a call on one line of at most n runes, and whether it was
// cut: its arguments' values, hidden code points shown by name.
func Summary(input json.RawMessage, n int) (string, bool) {
	var parts []string
	for _, a := range Args(input) {
		parts = append(parts, a.Name+"="+a.Value)
	}
	s, _ := Visible(strings.Join(parts, " "))
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…", true
	}
	return s, false
}
